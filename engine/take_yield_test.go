package engine

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
)

// TestTakeYieldsTheP: with one P, a consumer draining a long queue gives
// the P up every takeYield chunks, so that a goroutine made runnable
// meanwhile (a runner worker back from the kernel, or one that yielded its
// P to processing) runs within takeYield chunks, not once the whole queue
// is drained. Without the yield the worker's sockets go unread for as long
// as the queue takes to drain, and on a core busy with receive work the
// runtime's own preemption comes hundreds of milliseconds late.
func TestTakeYieldsTheP(t *testing.T) {
	e, err := New(Config{Runner: RunnerGoroutine, Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	q := e.shards[0]
	const queued = 64 * takeYield
	for range queued {
		q.push(item{chunk: Chunk{Data: []byte("x"), heap: true}})
	}
	var taken atomic.Int64
	ranAt := make(chan int64, 1)
	go func() { ranAt <- taken.Load() }()
	for taken.Load() < queued {
		c, ok, _ := e.take(q)
		if !ok {
			t.Fatalf("queue empty after %d of %d chunks", taken.Load(), queued)
		}
		c.Release()
		taken.Add(1)
	}
	if at := <-ranAt; at >= takeYield {
		t.Fatalf("a runnable goroutine ran after the consumer took %d chunks; want fewer than %d (takeYield)", at, takeYield)
	}
}
