package engine_test

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// runnerStats sums the engine's runners' counters of accepting in their
// own loops.
func runnerStats(e *engine.Engine) (accepted uint64, direct int) {
	for _, rs := range e.Stats().Runners {
		accepted += rs.Accepted
		direct += rs.DirectFiles
	}
	return accepted, direct
}

// loopAcceptRunners are the runners that accept a listener's connections
// in their own loops (contract.AcceptRunner).
var loopAcceptRunners = []string{engine.RunnerURing, engine.RunnerEpoll}

// forLoopAcceptRunners runs f as a subtest per runner that accepts in its
// own loops.
func forLoopAcceptRunners(t *testing.T, f func(t *testing.T, runner string)) {
	for _, runner := range loopAcceptRunners {
		t.Run(runner, func(t *testing.T) {
			requireRunner(t, runner)
			f(t, runner)
		})
	}
}

// TestLoopAccept checks that a listener's connections are accepted in
// the runner's own loops: under uring on the workers' rings straight into
// their file tables, under epoll with accept4 on a readiness edge. The
// runner counts every accept; under uring every connection sits in a
// table while open and leaves it when it ends; and every byte arrives
// exact, in order, under its own connection.
func TestLoopAccept(t *testing.T) { forLoopAcceptRunners(t, testLoopAccept) }

func testLoopAccept(t *testing.T, runner string) {
	const conns = 100
	h := newHarness(t, runner, engine.Config{Workers: 2, Buffers: 64, BufSize: 16 << 10})
	clients := make([]*net.TCPConn, conns)
	names := make([]string, conns)
	for i := range clients {
		clients[i], names[i] = h.dial()
		defer clients[i].Close()
	}
	waitUntil(t, "every connection accepted, and under uring in a file table", func() bool {
		accepted, direct := runnerStats(h.e)
		return accepted == conns && (runner != engine.RunnerURing || direct == conns)
	})
	want := make([]sent, conns)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			p := make([]byte, 1+i*997)
			for j := range p {
				p[j] = byte(i*7 + j*13)
			}
			if _, err := c.Write(p); err != nil {
				t.Errorf("client %d: %v", i, err)
			}
			want[i] = sent{bytes: int64(len(p)), crc: crc32.Checksum(p, srcstest.Castagnoli)}
			c.Close()
		})
	}
	wg.Wait()
	h.col.waitFor("every stream to its end", 30*time.Second, func(m map[string]*stream) bool {
		for _, name := range names {
			if s := m[name]; s == nil || !s.eos {
				return false
			}
		}
		return true
	})
	for i, name := range names {
		if got := h.col.get(name); got.bytes != want[i].bytes || got.crc != want[i].crc || len(got.errs) != 0 {
			t.Errorf("%s: got %d bytes crc %08x errors %v; sent %d crc %08x", name, got.bytes, got.crc, got.errs, want[i].bytes, want[i].crc)
		}
	}
	waitUntil(t, "every ended connection out of the file tables", func() bool {
		_, direct := runnerStats(h.e)
		return direct == 0
	})
}

// TestLoopAcceptMaxConns checks the connection cap with accepts in the
// runner's loops: at MaxConns nothing is granted, so a further client
// waits in the backlog, and each connection that ends lets exactly one
// more in.
func TestLoopAcceptMaxConns(t *testing.T) { forLoopAcceptRunners(t, testLoopAcceptMaxConns) }

func testLoopAcceptMaxConns(t *testing.T, runner string) {
	h := newHarness(t, runner, engine.Config{Workers: 2, Buffers: 16, BufSize: 16 << 10})
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	var clients [4]*net.TCPConn
	var names [4]string
	for i := range clients {
		clients[i], names[i] = dialTagged(t, ln.Addr().String(), nil)
		defer clients[i].Close()
	}
	first := -1
	seen := func(n int) func(map[string]*stream) bool {
		return func(m map[string]*stream) bool {
			k := 0
			first = -1
			for i, name := range names {
				if m[name] != nil {
					if first < 0 {
						first = i
					}
					k++
				}
			}
			return k >= n
		}
	}
	accepted := func() uint64 { return ln.Stats().Accepted }
	h.col.waitFor("two connections", 10*time.Second, seen(2))
	time.Sleep(200 * time.Millisecond) // a third accept would have been armed and taken by now
	if n := accepted(); n != 2 {
		t.Fatalf("%d connections accepted under MaxConns 2", n)
	}
	// One that was accepted ends: one more comes in, and no more.
	clients[first].Close()
	h.col.waitFor("a third connection", 10*time.Second, seen(3))
	time.Sleep(200 * time.Millisecond)
	if n := accepted(); n != 3 {
		t.Fatalf("%d connections accepted after one of two ended, want 3", n)
	}
}

// TestLoopAcceptAllow checks Allow with accepts in the runner's loops: a
// peer not allowed is closed at accept and counted, and under uring its
// file slot emptied.
func TestLoopAcceptAllow(t *testing.T) { forLoopAcceptRunners(t, testLoopAcceptAllow) }

func testLoopAcceptAllow(t *testing.T, runner string) {
	h := newHarness(t, runner, engine.Config{Workers: 1, Buffers: 16, BufSize: 16 << 10})
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{Allow: []string{"192.0.2.0/24"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	accepted0, _ := runnerStats(h.e)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a peer not in allow read data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a peer not in allow was not closed")
	}
	if st := ln.Stats(); st.Denied != 1 || st.Accepted != 0 {
		t.Errorf("listener stats %+v, want 1 denied and 0 accepted", st)
	}
	if accepted, _ := runnerStats(h.e); accepted != accepted0+1 {
		t.Errorf("the runner accepted %d connections, want %d", accepted-accepted0, 1)
	}
	waitUntil(t, "the refused connection out of the file table", func() bool {
		_, direct := runnerStats(h.e)
		return direct == 0
	})
}

// TestLoopAcceptShutdown checks that the accepts granted when the engine
// shuts down are stopped (under uring cancelled, their slots emptied),
// that connections waiting in the backlog are closed, and that nothing
// leaks: the process's descriptors come back to where they were.
func TestLoopAcceptShutdown(t *testing.T) { forLoopAcceptRunners(t, testLoopAcceptShutdown) }

func testLoopAcceptShutdown(t *testing.T, runner string) {
	t.Setenv(engine.EnvRunner, "")
	before := openFDs(t)
	for round := range 3 {
		e, err := engine.New(engine.Config{Runner: runner, Workers: 2, Buffers: 16, BufSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		goDrain(t, e, 1)
		ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.AddListener(ln); err != nil {
			t.Fatal(err)
		}
		var cs []net.Conn
		for range 5 * round {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("round %d: shutdown: %v", round, err)
		}
		cancel()
		for i, c := range cs {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
				t.Errorf("round %d: client %d after shutdown: %v, want the end", round, i, err)
			}
			c.Close()
		}
	}
	if after := openFDs(t); after > before {
		t.Errorf("%d descriptors open after 3 engines shut down, %d before", after, before)
	}
}

// isReset says whether err is a connection reset.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
