package engine_test

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// streamForever writes random bytes to c until it fails, then closes it.
func streamForever(c net.Conn, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, 8<<10)
	for {
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return
		}
	}
}

// stopWhilePaused fills the engine's queue past its high watermark, so
// that the engine pauses the runner, then stops a source while paused (it
// must still end) and shuts the engine down while paused (Shutdown must
// return, every chunk home). The runner's side, Remove and Close while
// paused, is runnertest's Pause and CloseWhilePaused.
func stopWhilePaused(t *testing.T, runner string) {
	// Tiny watermarks: two undelivered chunks pause every read.
	h := newHarness(t, runner, engine.Config{Workers: 1, Buffers: 16, BufSize: 4 << 10,
		Flush: time.Millisecond, QueueHigh: 2, QueueLow: 1})
	// The consumer stops pulling, so undelivered chunks pile up past
	// the high watermark.
	h.col.setPulling(false)
	var conns []net.Conn
	for i := range 8 {
		c, _ := h.dial()
		conns = append(conns, c)
		go streamForever(c, uint64(i))
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	waitPaused(t, h.e)
	// Stop one source while reads are paused: it must still end.
	var id srcs.ID
	waitSource(t, h.e, "tcp://"+conns[0].LocalAddr().String(), func(s engine.SourceStats) bool { id = s.ID; return true })
	if err := h.e.StopSource(id); err != nil {
		t.Fatal(err)
	}
	h.col.setPulling(true)
	// By its id: stopped while paused, the source may end before it
	// read a byte, even its tag.
	h.col.waitFor("the stopped source's end", 30*time.Second, func(map[string]*stream) bool {
		s := h.col.byID[id]
		return s != nil && s.eos
	})
	// Pause again, then shut everything down while paused.
	h.col.setPulling(false)
	waitPaused(t, h.e)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		done <- h.e.Shutdown(ctx)
	}()
	h.col.setPulling(true) // shutdown waits for chunks to come home
	if err := <-done; err != nil {
		t.Fatalf("%s: shutdown while paused: %v", runner, err)
	}
}

func waitPaused(t *testing.T, e *engine.Engine) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !e.Stats().Paused {
		if time.Now().After(deadline) {
			t.Fatal("the engine never paused")
		}
		time.Sleep(time.Millisecond)
	}
}

// shutdownUnderTraffic shuts the engine down while 100 connections
// stream: Shutdown returns, every stream ends with its end-of-stream
// chunk, and no buffer, descriptor or goroutine is left behind. The
// runner's Close in flight is runnertest's CloseInFlight.
func shutdownUnderTraffic(t *testing.T, runner string) {
	t.Setenv(engine.EnvRunner, "")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fdsBefore := openFDs(t)
	col := newCollector(t)
	e, err := engine.New(engine.Config{Runner: runner, Workers: 2, Buffers: 64, BufSize: 16 << 10},
		engine.WithErrorHandler(col.onError))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e.AddListener(ln)
	done := make(chan struct{})
	go func() { defer close(done); col.run(e) }()
	var conns []net.Conn
	var senders sync.WaitGroup
	for i := range 100 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		senders.Go(func() { streamForever(c, uint64(i)) })
	}
	// Let traffic flow, then shut down in the middle of it.
	col.waitFor("traffic", 30*time.Second, func(m map[string]*stream) bool {
		var total int64
		for _, s := range m {
			total += s.bytes
		}
		return total > 8<<20
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatalf("%s: shutdown: %v", runner, err)
	}
	<-done
	for _, c := range conns {
		c.Close()
	}
	senders.Wait()
	col.check()
	if st := e.Pool().Stats(); st.InUse != 0 {
		t.Fatalf("%s: %d buffers still in use after shutdown", runner, st.InUse)
	}
	if after := openFDs(t); after != fdsBefore {
		t.Fatalf("%s: %d descriptors open before, %d after shutdown", runner, fdsBefore, after)
	}
	// Every stream ended with its end-of-stream chunk.
	col.mu.Lock()
	defer col.mu.Unlock()
	for name, s := range col.streams {
		if !s.eos {
			t.Errorf("%s: %s never ended", runner, name)
		}
	}
}
