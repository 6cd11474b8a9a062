package engine_test

import (
	"context"
	"errors"
	"math/bits"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestReconnectReports: a client whose server refuses it for a while is
// reported at its first failure and then at a falling rate (the 2nd,
// 4th, 8th attempt), each report saying how many attempts failed; every
// failure counts; when the server comes back, the error handler hears
// that the client connected again, after how many attempts. The ends of
// its sessions and of the source carry how they ended, and no error of
// an outage the source recovered from: a clean session end is Closed
// with no LastErr, and so is the end of a source stopped after it.
func TestReconnectReports(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused until it listens again

	var mu sync.Mutex
	var reports []error
	e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096, Flush: time.Millisecond},
		engine.WithErrorHandler(func(err error) {
			mu.Lock()
			reports = append(reports, err)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	client, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: addr,
		Backoff: srcs.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.AddSource(client, engine.WithSessionEnds())
	if err != nil {
		t.Fatal(err)
	}
	// Let it fail at least 9 times, then listen again: one session,
	// which says hello and hangs up.
	failures := func() uint64 {
		st, _ := e.SourceStats(id)
		return st.Errors
	}
	deadline := time.Now().Add(10 * time.Second)
	for failures() < 9 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d failures", failures())
		}
		time.Sleep(time.Millisecond)
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	go func() {
		c, err := l.Accept()
		l.Close() // refused again from the next dial on
		if err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	var sessionEnd, end *engine.SourceStats
	var data string
	for c, err := range e.Chunks(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		data += string(c.Data)
		switch {
		case c.SessionEnd:
			sessionEnd = c.Final
			go e.Shutdown(context.Background())
		case c.Flags&srcs.EndOfStream != 0:
			end = c.Final
		}
		if end != nil {
			break
		}
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if data != "hello" {
		t.Errorf("data %q", data)
	}
	if sessionEnd == nil || sessionEnd.State != engine.Closed || sessionEnd.LastErr != nil {
		t.Errorf("the session's end: %+v; want Closed, with no error", sessionEnd)
	}
	if end == nil || end.State != engine.Closed || end.LastErr != nil {
		t.Errorf("the source's end: %+v; want Closed, with no error", end)
	}

	mu.Lock()
	defer mu.Unlock()
	// Before the session: failures 1, 2, 4, 8 and maybe 16, 32, ...,
	// then the recovery.
	var refused, again, failed int
	attempt := 1
	for _, r := range reports {
		if errors.Is(r, engine.ErrReconnected) {
			again++
			_, after, _ := strings.Cut(r.Error(), "connected again after ")
			n, rest, _ := strings.Cut(after, " ")
			failed, _ = strconv.Atoi(n)
			if !strings.HasPrefix(rest, "failed attempts over ") {
				t.Errorf("recovery report %q", r)
			}
			break
		}
		refused++
		var se *srcs.SourceError
		if !errors.As(r, &se) || se.Op != "open" || se.ID != id {
			t.Fatalf("report %v", r)
		}
		if attempt > 1 && !strings.Contains(r.Error(), "still failing after "+strconv.Itoa(attempt)+" attempts over ") {
			t.Errorf("report of attempt %d: %q", attempt, r)
		}
		attempt *= 2
	}
	if again != 1 || failed < 9 || refused != bits.Len(uint(failed)) {
		t.Errorf("%d reports of an outage of %d failed attempts, and %d of the recovery, in %d reports:\n%v",
			refused, failed, again, len(reports), reports)
	}
	if end.Errors < uint64(failed) {
		t.Errorf("the source counts %d errors, fewer than the %d failed attempts", end.Errors, failed)
	}
}
