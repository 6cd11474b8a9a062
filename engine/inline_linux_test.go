package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/srcs"
)

// The handler runs on the thread that read the chunk: an event-loop
// runner with one worker calls it from that worker's thread only, and the
// thread runner from each source's own. (A goroutine runner's source
// goroutine may move between threads, so it is not checked here.)
func TestInlineRunsWhereRead(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		var mu sync.Mutex
		tids := map[int]bool{}
		ended := make(chan struct{}, 16)
		handle := func(c engine.Chunk) {
			if len(c.Data) > 0 {
				mu.Lock()
				tids[unix.Gettid()] = true
				mu.Unlock()
			}
			if c.Flags&srcs.EndOfStream != 0 {
				ended <- struct{}{}
			}
			c.Release()
		}
		e, addr := enginetest.Listen(t, engine.Config{Runner: runner, Workers: 1, Buffers: 32, BufSize: 4 << 10, Flush: time.Millisecond}, srcs.ListenerConfig{}, []engine.Option{engine.WithInlineHandler(handle)})
		if _, err := e.Next(context.Background()); err == nil {
			t.Error("Next returned a chunk from an engine with an inline handler")
		}
		const conns = 4
		for range conns {
			c, _ := dialTagged(t, addr, nil)
			for range 20 {
				if _, err := c.Write(make([]byte, 3000)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond)
			}
			c.Close()
		}
		for range conns {
			select {
			case <-ended:
			case <-time.After(30 * time.Second):
				t.Fatal("the streams did not end")
			}
		}
		if err := e.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		switch runner {
		case engine.RunnerURing, engine.RunnerEpoll:
			if len(tids) != 1 {
				t.Errorf("%s: one worker's chunks reached the handler on %d threads, want its own only", runner, len(tids))
			}
		case engine.RunnerThread:
			if len(tids) == 0 || len(tids) > conns {
				t.Errorf("%s: %d sources' chunks reached the handler on %d threads", runner, conns, len(tids))
			}
		}
	})
}
