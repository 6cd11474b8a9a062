package engine_test

import (
	"context"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/internal/testkit/synthetic"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// processingCannotStarveSources checks G2 one way: a processing stage
// with its own pool, which it keeps exhausted for a while, does not stop
// the sources from being served once it lets go, and never needs a source
// buffer to do so.
func processingCannotStarveSources(t *testing.T, runner string) {
	t.Setenv(engine.EnvRunner, "")
	stage, err := pool.New(pool.Config{BufSize: 4 << 10, Buffers: 8, MaxPerSource: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stage.Close(); err != nil {
			t.Error(err)
		}
	}()
	var (
		mu     sync.Mutex
		window []*pool.Buf // the stage's working set: it holds up to 8
		got    = map[srcs.ID]uint32{}
		ended  atomic.Int64
	)
	acct := stage.Join(1)
	defer acct.Leave()
	h := func(c engine.Chunk) {
		defer c.Release()
		if c.Flags&srcs.EndOfStream != 0 {
			ended.Add(1)
			return
		}
		// Copy into the stage's own memory, release the source chunk,
		// and keep the copy in a sliding window that fills the stage
		// pool completely.
		b, err := acct.Acquire(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		copy(b.Bytes(), c.Data[:min(len(c.Data), len(b.Bytes()))])
		mu.Lock()
		got[c.Source] = crc32.Update(got[c.Source], srcstest.Castagnoli, c.Data)
		window = append(window, b)
		var old *pool.Buf
		if len(window) == 8 {
			old, window = window[0], window[1:]
		}
		mu.Unlock()
		if old != nil {
			old.Release()
		}
	}
	e, err := engine.New(engine.Config{Runner: runner, Workers: 1, Buffers: 16, BufSize: 4 << 10, Handlers: 1},
		engine.WithHandler(h))
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	want := map[srcs.ID]sent{}
	for i := range n {
		s, err := synthetic.New(synthetic.Config{Total: 256 << 10, Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		bytes, crc := s.Digest()
		id, err := e.AddSource(s)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = sent{bytes, crc}
	}
	deadline := time.Now().Add(60 * time.Second)
	for ended.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ended.Load() < n {
		t.Fatalf("%s: only %d of %d sources ended: the stage starved them", runner, ended.Load(), n)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, b := range window {
		b.Release()
	}
	window = nil
	for id, w := range want {
		if got[id] != w.crc {
			t.Errorf("%s: source %d crc %08x, want %08x", runner, id, got[id], w.crc)
		}
	}
	mu.Unlock()
}

// TestSourcesCannotStarveProcessing checks G2 the other way: with every
// source buffer held by unreleased chunks, a processing stage still gets
// all of its own buffers.
func TestSourcesCannotStarveProcessing(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	h := newHarness(t, engine.RunnerGoroutine, engine.Config{Buffers: 8, BufSize: 4 << 10, MaxPerSource: 8, Flush: time.Millisecond})
	h.col.setHold(true)
	c, _ := h.dial()
	go streamForever(c, 1)
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for h.e.Pool().Stats().Free != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the source pool never filled")
		}
		time.Sleep(time.Millisecond)
	}
	stage, err := pool.New(pool.Config{BufSize: 4 << 10, Buffers: 8, MaxPerSource: 8})
	if err != nil {
		t.Fatal(err)
	}
	acct := stage.Join(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var held []*pool.Buf
	for range 8 {
		b, err := acct.Acquire(ctx)
		if err != nil {
			t.Fatalf("the stage could not get its own buffer while sources held theirs: %v", err)
		}
		held = append(held, b)
	}
	for _, b := range held {
		b.Release()
	}
	acct.Leave()
	if err := stage.Close(); err != nil {
		t.Fatal(err)
	}
}
