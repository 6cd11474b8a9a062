package ring

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// acceptRig is a uring runner with two workers a killer can fail, and a
// listener accepting through it.
type acceptRig struct {
	t   *testing.T
	r   *Runner
	k   *killer
	ln  *srcs.Listener
	ra  contract.Acceptor
	got chan srcs.Source
	err chan error
}

func newAcceptRig(t *testing.T) *acceptRig {
	t.Helper()
	requireURing(t)
	p, err := pool.New(pool.Config{BufSize: 4 << 10, Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	k := new(killer)
	r, err := newRunner(contract.RunnerConfig{Workers: 2, Pool: p}, runnerOptions{fault: k.hook})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	ra, err := ln.AcceptThrough(r)
	if err != nil {
		ln.Close()
		r.Close()
		t.Fatal(err)
	}
	g := &acceptRig{t: t, r: r, k: k, ln: ln, ra: ra, got: make(chan srcs.Source, 64), err: make(chan error, 1)}
	go func() {
		for {
			src, err := ra.Accept(context.Background())
			if err != nil {
				g.err <- err
				return
			}
			g.got <- src
		}
	}()
	return g
}

// accept dials n connections and waits for the acceptor to yield them.
func (g *acceptRig) accept(n int) []srcs.Source {
	g.t.Helper()
	var out []srcs.Source
	for range n {
		c, err := net.Dial("tcp", g.ln.Addr().String())
		if err != nil {
			g.t.Fatal(err)
		}
		g.t.Cleanup(func() { c.Close() })
		select {
		case src := <-g.got:
			out = append(out, src)
		case err := <-g.err:
			g.t.Fatalf("accept: %v", err)
		case <-time.After(10 * time.Second):
			g.t.Fatalf("connection %d not accepted within 10s", len(out))
		}
	}
	return out
}

// TestAcceptWorkerFails fails one of two workers while a listener's
// accepts are armed on both: the failed worker's grants come back to be
// granted again, the other worker accepts every later connection, and
// closing the acceptor returns once every grant is back.
func TestAcceptWorkerFails(t *testing.T) {
	g := newAcceptRig(t)
	for _, src := range g.accept(4) {
		if _, ok := src.(contract.Directed); !ok {
			t.Errorf("%s: accepted as %T, want a connection in a file table", src.Name(), src)
		}
		src.Close()
	}
	g.k.kill[0].Store(&errInjected)
	// Twice: the first may be taken by a turn that began before the
	// store; the second then wakes the worker for one that fails.
	g.r.sync()
	g.r.sync()
	// Until worker 0 has exited, not just stopped: while it reaps its
	// last completions an accept armed there may still take a
	// connection, which it closes (its table goes with its ring).
	for deadline := time.Now().Add(10 * time.Second); g.r.Stats().Threads != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker 0 did not exit: threads %d, stopped %v", g.r.Stats().Threads, g.r.workers[0].Stopped())
		}
	}
	before := g.r.workers[1].accepted.Load()
	for _, src := range g.accept(20) {
		src.Close()
	}
	if n := g.r.workers[1].accepted.Load() - before; n != 20 {
		t.Errorf("worker 1 accepted %d of the 20 connections after worker 0 failed", n)
	}
	g.ln.Close()
	if err := <-g.err; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after the listener closed: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- g.ra.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the acceptor did not return: a grant never came back")
	}
	if err := g.r.Close(); !errors.Is(err, errInjected) {
		t.Errorf("runner close: %v, want the injected failure", err)
	}
	if n := g.r.workers[1].files.used.Load(); n != 0 {
		t.Errorf("%d connections left in worker 1's table", n)
	}
}

// TestAcceptRunnerCloses closes the runner under an acceptor: Accept
// fails with net.ErrClosed, the connections accepted before are closed
// with the rings, and closing the acceptor returns.
func TestAcceptRunnerCloses(t *testing.T) {
	g := newAcceptRig(t)
	held := g.accept(3)
	if err := g.r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.err:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after the runner closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not fail after the runner closed")
	}
	for _, src := range held {
		src.Close() // the worker is gone: nothing to post to
	}
	g.ln.Close()
	done := make(chan struct{})
	go func() { g.ra.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("closing the acceptor did not return")
	}
}

// TestAcceptSpread checks that a listener's connections spread over the
// workers: each worker reads the connections it accepted, so accepts
// that favoured one worker would leave the others idle under load.
func TestAcceptSpread(t *testing.T) {
	g := newAcceptRig(t)
	defer func() {
		g.ln.Close()
		<-g.err // the acceptor's loop is done
		g.ra.Close()
		g.r.Close()
	}()
	const conns = 320
	check := func(how string, n, pct uint64) {
		t.Helper()
		a0, a1 := g.r.workers[0].accepted.Load(), g.r.workers[1].accepted.Load()
		t.Logf("%s: worker 0 accepted %d, worker 1 %d", how, a0, a1)
		if a0+a1 != n || min(a0, a1) < n*pct/100 {
			t.Errorf("%s: workers accepted %d and %d of %d connections, want each at least %d%%", how, a0, a1, n, pct)
		}
	}
	for _, src := range g.accept(conns) {
		src.Close()
	}
	check("one at a time", conns, 30)
	// A burst: every connection queued at once.
	var cs []net.Conn
	for range conns {
		c, err := net.Dial("tcp", g.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	for range cs {
		select {
		case src := <-g.got:
			src.Close()
		case err := <-g.err:
			t.Fatalf("accept: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("the burst was not accepted within 10s")
		}
	}
	// Which worker's accepts catch a burst depends on which runs first;
	// the first half keeps each worker's share well above this.
	check("after a burst", 2*conns, 20)
}
