package engine_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// endless is a source without a descriptor that always has data.
type endless struct{}

func (endless) Name() string               { return "endless" }
func (endless) Open(context.Context) error { return nil }
func (endless) Read(p []byte) (int, error) { time.Sleep(time.Millisecond); return len(p), nil }
func (endless) Close() error               { return nil }

// drain pulls and releases chunks until the engine closes, in a loop
// over Chunks, which Shutdown waits for.
func drain(e *engine.Engine) {
	for range e.Chunks(context.Background()) {
	}
}

// goDrain drains e on n goroutines, and returns once their loops are in
// progress, so that a Shutdown after it waits for them.
func goDrain(t *testing.T, e *engine.Engine, n int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	before := e.ChunksLoops()
	for range n {
		wg.Go(func() { drain(e) })
	}
	waitUntil(t, "the loops over Chunks", func() bool { return e.ChunksLoops() >= before+n })
	return &wg
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// With two buffers the default low watermark is zero; reads must still
// resume once the consumer empties the queue.
func TestPauseResumesAtALowMarkOfZero(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 2, BufSize: 4096, MaxPerSource: 2, Flush: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddSource(endless{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a pause", func() bool { return e.Stats().Paused })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for got := range 10 {
		c, err := e.Next(ctx)
		if err != nil {
			st := e.Stats()
			t.Fatalf("after %d chunks: %v (queued %d, paused %v): reads never resumed", got, err, st.Queued, st.Paused)
		}
		c.Release()
	}
	goDrain(t, e, 1)
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEveryNextReturnsAfterShutdown(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 8, BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	wg := goDrain(t, e, 4)
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Next callers still blocked 10s after Shutdown returned")
	}
}

func TestShutdownHonoursItsContext(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	block := make(chan struct{})
	got := make(chan struct{}, 1)
	e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 8, BufSize: 4096, Handlers: 1},
		engine.WithHandler(func(c engine.Chunk) {
			select {
			case got <- struct{}{}:
			default:
			}
			<-block // a downstream that is stuck
			c.Release()
		}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddSource(endless{}); err != nil {
		t.Fatal(err)
	}
	<-got
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- e.Shutdown(ctx) }()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("Shutdown reported success with a handler stuck")
		}
		t.Logf("shutdown: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown with a 300ms context still running after 10s")
	}
	// Unstick the handler so its goroutine ends before the leak check.
	close(block)
	if err := e.Shutdown(context.Background()); err == nil {
		t.Fatal("a second Shutdown should repeat the first one's error")
	}
	waitUntil(t, "the handler to release its chunks", func() bool { return e.Pool().Stats().InUse == 0 })
}

// A runner created while the engine is paused starts paused.
func TestSideRunnerStartsPaused(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Runner: engine.RunnerEpoll, Buffers: 16, BufSize: 4096, MaxPerSource: 8,
		QueueHigh: 2, QueueLow: 1, Flush: -1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	go cc.Write(make([]byte, 64<<10))
	if _, err := e.AddSource(srcs.NewConn(sc)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a pause", func() bool { return e.Stats().Paused })
	// The first source without a descriptor creates the goroutine runner.
	id, err := e.AddSource(endless{})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing signals "did not read"; give a reader that ignored the
	// pause ample time to show itself.
	time.Sleep(200 * time.Millisecond)
	st := e.Stats()
	for _, s := range st.Sources {
		if s.ID == id && st.Paused && s.Chunks > 0 {
			t.Fatalf("the side runner read %d chunks while the engine was paused", s.Chunks)
		}
	}
	goDrain(t, e, 1)
	cc.Close()
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Idle dialing sources on the goroutine runner wait for readability
// before they take a buffer, so they cannot starve the pool.
func TestIdleClientsHoldNoBuffers(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var peers []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for range 50 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			peers = append(peers, c)
		}
	}()
	e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 16, BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		c, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: ln.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.AddSource(c); err != nil {
			t.Fatal(err)
		}
	}
	<-accepted
	waitUntil(t, "all 50 clients running", func() bool {
		running := 0
		for _, s := range e.Stats().Sources {
			if s.State == engine.Running {
				running++
			}
		}
		return running == 50
	})
	// Give a runner that pins buffers time to take them.
	time.Sleep(100 * time.Millisecond)
	if st := e.Pool().Stats(); st.InUse != 0 {
		t.Fatalf("50 idle clients hold %d buffers", st.InUse)
	}
	// One peer speaks; its bytes arrive although 49 others sit idle.
	peers[0].Write([]byte("hello"))
	c, err := e.Next(context.Background())
	if err != nil || string(c.Data) != "hello" {
		t.Fatalf("got %q, %v", c.Data, err)
	}
	c.Release()
	goDrain(t, e, 1)
	for _, p := range peers {
		p.Close()
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
