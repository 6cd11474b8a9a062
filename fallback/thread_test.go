package fallback_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// newThreadRig is a Rig over a thread runner capped at maxThreads.
func newThreadRig(t *testing.T, buffers, maxThreads int) *runnertest.Rig {
	t.Helper()
	return runnertest.NewRig(t, newThread, runnertest.RigConfig{
		Pool:   pool.Config{Buffers: buffers},
		Runner: contract.RunnerConfig{MaxThreads: maxThreads},
	})
}

func TestThreadLimit(t *testing.T) {
	g := newThreadRig(t, 8, 3)
	var clients []net.Conn
	var lanes []*contract.Lane
	for range 3 {
		c, l := g.Conn(0)
		clients, lanes = append(clients, c), append(lanes, l)
	}
	if st := g.R.Stats(); st.Threads != 3 || st.Lanes != 3 {
		t.Fatalf("stats with 3 lanes: %+v", st)
	}
	client, server := g.Dial()
	extra := g.Lane(srcs.NewConn(server), 0)
	err := g.R.Add(extra)
	if !errors.Is(err, fallback.ErrThreadLimit) {
		t.Fatalf("fourth lane: %v, want ErrThreadLimit", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "fallback: thread: ") || !strings.Contains(msg, "MaxThreads") || !strings.Contains(msg, " 3") {
		t.Errorf("error does not name the cap and how to raise it: %q", msg)
	}
	if st := g.R.Stats(); st.Threads != 3 {
		t.Errorf("a refused lane took a thread: %+v", st)
	}
	// The refused source was left untouched, still readable by others.
	client.Write([]byte("ok"))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(extra.Src, buf); err != nil {
		t.Errorf("refused source: %v", err)
	}

	// A finished lane frees its thread for the next Add.
	clients[0].Close()
	if lr := g.Finish(lanes[0]); !errors.Is(lr.Err, io.EOF) {
		t.Errorf("lane ended with %v", lr.Err)
	}
	if err := g.R.Add(extra); err != nil {
		t.Fatalf("add after a lane finished: %v", err)
	}
	if st := g.R.Stats(); st.Threads != 3 {
		t.Errorf("stats: %+v, want 3 threads", st)
	}
}

func TestThreadConfig(t *testing.T) {
	if _, err := fallback.NewThread(contract.RunnerConfig{MaxThreads: -1}); err == nil || !strings.Contains(err.Error(), "MaxThreads") {
		t.Errorf("negative MaxThreads: %v", err)
	}
	r, err := fallback.NewThread(contract.RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != "thread" {
		t.Errorf("Name() = %q", r.Name())
	}
	r.Close()
}

// fakeDesc is a source whose descriptor is whatever the test says.
type fakeDesc struct {
	desc contract.Desc
	err  error
}

func (s *fakeDesc) Name() string                 { return "fake" }
func (s *fakeDesc) Open(context.Context) error   { return nil }
func (s *fakeDesc) Read([]byte) (int, error)     { return 0, io.EOF }
func (s *fakeDesc) Close() error                 { return nil }
func (s *fakeDesc) Desc() (contract.Desc, error) { return s.desc, s.err }

func TestThreadAddErrors(t *testing.T) {
	descErr := errors.New("no session")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	for _, tc := range []struct {
		name string
		src  srcs.Source
		want error
	}{
		{"NoDescriptor", plainSource{&fakeDesc{}}, srcs.ErrNoDescriptor},
		{"DatagramNotSocket", &fakeDesc{desc: contract.Desc{FD: int(pr.Fd()), Kind: contract.Datagram}}, syscall.ENOTSOCK},
		{"DescError", &fakeDesc{err: descErr}, descErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newThreadRig(t, 1, 1)
			err := g.R.Add(g.Lane(tc.src, 0))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Add: %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "fallback: thread: ") {
				t.Errorf("error %q does not name the runner", err)
			}
			if st := g.R.Stats(); st.Threads != 0 || st.Lanes != 0 {
				t.Errorf("a refused lane left state behind: %+v", st)
			}
		})
	}
}
