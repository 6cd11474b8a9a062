package engine

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// The chunk path is what the engine costs per chunk with no kernel and no
// runner: a runner's Emit, delivery through the queue and the watermarks,
// the consumer's take and Release, and the runner's next acquire. These
// benchmarks measure that floor, which every runner pays on top of its
// reads (target: under 1 µs per chunk).

// idleSource is a source without a descriptor that nothing ever reads: the
// benchmarks emit on its lane themselves.
type idleSource struct{}

func (idleSource) Name() string               { return "idle" }
func (idleSource) Open(context.Context) error { return nil }
func (idleSource) Read([]byte) (int, error)   { return 0, io.EOF }
func (idleSource) Close() error               { return nil }

// chunkPathEngine returns an engine (goroutine runner, which the path does
// not touch) and n registered sources whose lanes the caller drives.
func chunkPathEngine(tb testing.TB, n int, opts ...Option) (*Engine, []*source) {
	tb.Helper()
	tb.Setenv(EnvRunner, "")
	e, err := New(Config{Runner: RunnerGoroutine, Buffers: 256, BufSize: 64 << 10, MaxPerSource: 256}, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	ss := make([]*source, n)
	for i := range ss {
		if ss[i], _, err = e.newSource(idleSource{}, nil); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		for _, s := range ss {
			// Never opened: stop it, and end the open it never made.
			s.handle(evStop, nil)
			s.handle(evOpenFailed, io.EOF)
		}
		if e.handler == nil {
			// A loop over Chunks, which Shutdown waits for.
			go func() {
				for range e.Chunks(context.Background()) {
				}
			}()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
	})
	return e, ss
}

// emitOne acquires a buffer on s's lane and emits it whole, as a runner
// does after a read that filled it.
func emitOne(tb testing.TB, s *source, now time.Time) {
	b, ok := s.lane.Account.TryAcquire()
	if !ok {
		tb.Fatal("no buffer")
	}
	s.Emit(&s.lane, b, len(b.Bytes()), 0, now)
}

// TestChunkPathAllocs: emitting, taking and releasing a chunk allocates
// nothing.
func TestChunkPathAllocs(t *testing.T) {
	e, ss := chunkPathEngine(t, 1)
	s := ss[0]
	now := time.Now()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		emitOne(t, s, now)
		c, err := e.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
	})
	if allocs != 0 {
		t.Errorf("chunk path allocates %.1f times per chunk, want 0", allocs)
	}
}

// BenchmarkChunkPath measures the engine's own cost per chunk.
//
//   - inline: one goroutine emits, takes and releases; the cost of the
//     code alone, with no hand-off.
//   - pull: a producer emits, re-acquiring with the runners' asynchronous
//     Wait when the pool runs dry, while a consumer pulls with Next and
//     releases; the cross-goroutine hand-off a real engine pays.
//   - push: the same with a handler (WithHandler) as the consumer.
//   - push-inline: the same with an inline handler (WithInlineHandler),
//     which runs inside Emit: no queue, no hand-off.
func BenchmarkChunkPath(b *testing.B) {
	b.Run("inline", func(b *testing.B) {
		e, ss := chunkPathEngine(b, 1)
		s, now, ctx := ss[0], time.Now(), context.Background()
		b.ReportAllocs()
		for b.Loop() {
			emitOne(b, s, now)
			c, err := e.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			c.Release()
		}
	})
	b.Run("pull", func(b *testing.B) {
		e, ss := chunkPathEngine(b, 8)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := e.Next(context.Background())
				if err != nil || c.Source == ^srcs.ID(0) {
					return
				}
				if c.Flags&srcs.EndOfStream != 0 {
					continue
				}
				c.Release()
			}
		}()
		produce(b, ss)
		e.deliver(ss[0], item{chunk: Chunk{Source: ^srcs.ID(0)}}) // stop the consumer
		<-done
	})
	b.Run("push", func(b *testing.B) {
		_, ss := chunkPathEngine(b, 8, WithHandler(func(c Chunk) { c.Release() }))
		produce(b, ss)
	})
	b.Run("push-inline", func(b *testing.B) {
		_, ss := chunkPathEngine(b, 8, WithInlineHandler(func(c Chunk) { c.Release() }))
		produce(b, ss)
	})
}

// TestChunkPathInlineAllocs: an inline handler's chunk path allocates
// nothing either.
func TestChunkPathInlineAllocs(t *testing.T) {
	var got int
	_, ss := chunkPathEngine(t, 1, WithInlineHandler(func(c Chunk) {
		got++
		c.Release()
	}))
	s, now := ss[0], time.Now()
	allocs := testing.AllocsPerRun(1000, func() { emitOne(t, s, now) })
	if allocs != 0 {
		t.Errorf("inline chunk path allocates %.1f times per chunk, want 0", allocs)
	}
	if got < 1000 {
		t.Errorf("the inline handler ran %d times for 1,000 chunks", got)
	}
}

// produce emits b.N whole buffers round-robin over ss from one goroutine,
// as a runner worker would: TryAcquire, else Wait for a grant.
func produce(b *testing.B, ss []*source) {
	granted := make(chan struct{}, 1)
	notify := func() {
		select {
		case granted <- struct{}{}:
		default:
		}
	}
	now := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := ss[i%len(ss)]
		i++
		a := s.lane.Account
		buf, ok := a.TryAcquire()
		for !ok {
			var err error
			if buf, ok, err = a.Wait(notify); err != nil {
				b.Fatal(err)
			}
			if !ok {
				<-granted
				buf, ok = a.Claim()
			}
		}
		s.Emit(&s.lane, buf, len(buf.Bytes()), 0, now)
	}
}
