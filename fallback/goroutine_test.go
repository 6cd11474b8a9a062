package fallback_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// plainSource hides every optional capability of a source.
type plainSource struct{ srcs.Source }

// Without a deadline the runner cannot wake a blocked Read: it emits every
// read at once, and Remove waits for the current Read to return.
func TestGoroutineNoDeadline(t *testing.T) {
	g := runnertest.NewRig(t, newGoroutine, runnertest.RigConfig{
		Pool:   pool.Config{Buffers: 4},
		Source: func(c net.Conn) srcs.Source { return plainSource{srcs.NewConn(c)} },
	})
	client, l := g.Conn(time.Hour)
	if _, err := client.Write([]byte("now")); err != nil {
		t.Fatal(err)
	}
	g.WaitUntil("an immediate emit", func() bool { return g.Rec.Lane(l.ID).Partials == 1 })
	g.WaitUntil("the next read", func() bool { return g.R.Stats().Reads >= 1 })
	g.R.Remove(l)
	if _, err := client.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	lr := g.Finish(l)
	if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes < 3 {
		t.Errorf("finished with %v after %d bytes", lr.Err, lr.Bytes)
	}
}

func TestGoroutineName(t *testing.T) {
	r, err := fallback.NewGoroutine(contract.RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Name() != "goroutine" {
		t.Errorf("Name() = %q", r.Name())
	}
}
