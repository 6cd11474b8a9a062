package fallback

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// errEpInjected is the failure injectFault gives a worker.
var errEpInjected = errors.New("injected epoll failure")

// epFaultRig is an Epoll under test from inside the package, so that tests
// can fail its workers. Its cleanup closes the runner (expecting closeErr),
// then the sources, and requires every buffer back in the pool.
type epFaultRig struct {
	t        *testing.T
	e        *Epoll
	pool     *pool.Pool
	rec      *srcstest.Recorder
	log      *bytes.Buffer
	closeErr error
	srcs     []srcs.Source
}

func newEpFaultRig(t *testing.T, workers int, pc pool.Config) *epFaultRig {
	t.Helper()
	p, err := pool.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	g := &epFaultRig{t: t, pool: p, rec: srcstest.NewRecorder(), log: new(bytes.Buffer)}
	log := slog.New(slog.NewTextHandler(g.log, nil))
	if g.e, err = NewEpoll(srcs.RunnerConfig{Workers: workers, Pool: p, Logger: log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.e.Close(); (err != nil || g.closeErr != nil) && !errors.Is(err, g.closeErr) {
			t.Errorf("Close: %v, want %v", err, g.closeErr)
		}
		for _, s := range g.srcs {
			s.Close()
		}
		g.rec.ReleaseAll()
		if err := g.rec.Err(); err != nil {
			t.Error(err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("pool.Close: %v", err)
		}
	})
	return g
}

// conns returns n connected loopback TCP pairs: the dialed ends, and the
// accepted ends as sources (closed by the rig's cleanup).
func (g *epFaultRig) conns(n int) ([]net.Conn, []*srcs.Conn) {
	g.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.t.Fatal(err)
	}
	defer ln.Close()
	clients := make([]net.Conn, n)
	servers := make([]*srcs.Conn, n)
	for i := range n {
		if clients[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			g.t.Fatal(err)
		}
		g.t.Cleanup(func() { clients[i].Close() })
		c, err := ln.Accept()
		if err != nil {
			g.t.Fatal(err)
		}
		servers[i] = srcs.NewConn(c)
		g.srcs = append(g.srcs, servers[i])
	}
	return clients, servers
}

func (g *epFaultRig) add(id srcs.ID, src srcs.Source, flush time.Duration) *srcs.Lane {
	g.t.Helper()
	l := &srcs.Lane{ID: id, Src: src, Account: g.pool.Join(pool.SourceID(id)), Flush: flush, Out: g.rec}
	if err := g.e.Add(l); err != nil {
		g.t.Fatalf("Add lane %d: %v", id, err)
	}
	return l
}

// waitUntil polls cond, for states no channel reports.
func (g *epFaultRig) waitUntil(what string, cond func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			g.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// kill fails worker i and waits until it has stopped.
func (g *epFaultRig) kill(i int) {
	g.t.Helper()
	if !g.e.injectFault(i, errEpInjected) {
		g.t.Fatalf("worker %d had stopped already", i)
	}
	g.waitUntil("the worker to stop", g.e.workers[i].Stopped)
}

// TestEpollFaultSkipsDeadWorker fails one of two workers: new lanes must
// all go to the other one (the dead worker has the lowest load, and its
// epoll descriptor is closed), and once both are dead Add must say so.
func TestEpollFaultSkipsDeadWorker(t *testing.T) {
	g := newEpFaultRig(t, 2, pool.Config{BufSize: 4 << 10, Buffers: 32})
	g.closeErr = errEpInjected
	clients, servers := g.conns(12)
	g.add(1, servers[0], 0) // worker 0
	g.add(2, servers[1], 0) // worker 1
	g.kill(0)
	got, err := g.rec.WaitFinished(1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[1]; lr == nil || !errors.Is(lr.Err, errEpInjected) {
		t.Fatalf("lane 1 on the dead worker: %+v, want Finish with the failure", lr)
	}
	if !strings.Contains(g.log.String(), "worker stopped") {
		t.Errorf("failure not logged: %q", g.log.String())
	}
	live := g.e.workers[1]
	for i := 2; i < 12; i++ {
		l := g.add(srcs.ID(i+1), servers[i], 0)
		ref, _ := g.e.front.Lookup(l)
		if ref.W != nil && ref.W != live {
			t.Errorf("lane %d went to a worker that has stopped", i+1)
		}
	}
	data := epFaultData(10 << 10)
	for _, c := range clients[1:] {
		c.Write(data)
		c.Close()
	}
	got, err = g.rec.WaitFinished(11, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if lr.Err != io.EOF || lr.Bytes != int64(len(data)) {
			t.Errorf("lane %d: Finish(%v) after %d of %d bytes", id, lr.Err, lr.Bytes, len(data))
		}
	}

	g.kill(1)
	_, more := g.conns(1)
	l := &srcs.Lane{ID: 99, Src: more[0], Account: g.pool.Join(99), Out: g.rec}
	err = g.e.Add(l)
	if !errors.Is(err, errEpInjected) || !strings.Contains(err.Error(), "epoll: add lane 99: all workers stopped") {
		t.Errorf("Add with every worker stopped: %v, want all workers stopped: the first failure", err)
	}
}

func epFaultData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// TestEpollPausedGrant makes a paused lane the first waiter for the only
// buffer: the grant must not stay with it for the whole pause but go on to
// the next waiter, and the lane must read after the resume.
func TestEpollPausedGrant(t *testing.T) {
	g := newEpFaultRig(t, 1, pool.Config{BufSize: 4 << 10, Buffers: 1})
	clients, servers := g.conns(2)
	holder := g.add(1, servers[0], time.Hour)
	waiter := g.add(2, servers[1], time.Hour)
	clients[0].Write(make([]byte, 100))
	g.waitUntil("lane 1 to read", func() bool { return g.e.Stats().Reads >= 1 && g.pool.Stats().InUse == 1 })
	clients[1].Write(make([]byte, 50))
	g.waitUntil("lane 2 to wait for a buffer", func() bool { return g.pool.Stats().Waiters == 1 })

	g.e.SetPaused(true)
	// A waiter that is not paused, queued behind lane 2.
	other := g.pool.Join(100)
	defer other.Leave()
	granted := make(chan struct{}, 1)
	if _, ok, err := other.Wait(func() { granted <- struct{}{} }); ok || err != nil {
		t.Fatalf("Wait: ok %v, err %v; want to queue", ok, err)
	}
	g.e.Remove(holder) // emits its 100 bytes; the recorder frees the buffer
	select {
	case <-granted:
	case <-time.After(5 * time.Second):
		t.Fatalf("paused lane kept the buffer: %+v, lane 2 holds %d", g.pool.Stats(), waiter.Account.Stats().Held)
	}
	b, ok := other.Claim()
	if !ok {
		t.Fatal("Claim after the grant: no buffer")
	}
	if held := waiter.Account.Stats().Held; held != 0 {
		t.Errorf("paused lane holds %d buffers", held)
	}
	b.Release()

	g.e.SetPaused(false)
	clients[1].Close()
	got, err := g.rec.WaitFinished(2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[2]; lr.Err != io.EOF || lr.Bytes != 50 {
		t.Errorf("lane 2 after the resume: Finish(%v) after %d bytes, want io.EOF after 50", lr.Err, lr.Bytes)
	}
}
