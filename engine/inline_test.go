package engine_test

import (
	"context"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// Inline delivery keeps every promise of the queued kind: each source's
// bytes once and in order, its errors behind its chunks, its end last.
func TestInlineConformance(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		h := newHarnessMode(t, runner, engine.Config{Workers: 2, BufSize: 16 << 10, Buffers: 64, Flush: 2 * time.Millisecond}, true)
		runSenders(t, h, 300, 48<<10)
		st := h.e.Stats()
		if st.Queued != 0 || st.Pauses != 0 {
			t.Errorf("%s: inline delivery queued %d chunks and paused %d times", runner, st.Queued, st.Pauses)
		}
		if st.Pool.Waits == 0 {
			t.Logf("%s: the pool never ran short", runner)
		}
	})
}

// A consumer that keeps its chunks throttles the senders through the pool
// alone, and everything arrives once it lets go.
func TestInlineSlowConsumer(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) { slowConsumer(t, runner) })
}

// Config.Delivery chooses the same inline delivery from a file, and
// refuses what it cannot do in the user's terms.
func TestDeliveryConfig(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	for _, tc := range []struct {
		delivery string
		handler  bool
		want     string // error text; "" for none
	}{
		{"", true, ""},
		{"queue", false, ""},
		{"inline", true, ""},
		{"inline", false, "Delivery = inline: needs a push handler"},
		{"fast", true, `Delivery = fast: must be "queue" or "inline"`},
	} {
		var opts []engine.Option
		if tc.handler {
			opts = append(opts, engine.WithHandler(func(c engine.Chunk) { c.Release() }))
		}
		e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 4, BufSize: 4096, Delivery: tc.delivery}, opts...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("delivery %q: %v", tc.delivery, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("delivery %q: error %v, want one containing %q", tc.delivery, err, tc.want)
		}
		if e != nil {
			e.Shutdown(context.Background())
		}
	}
}

// WithHandler with Delivery "inline" runs the handler where the chunk was
// read: while it is busy with a source's chunk, that source reads nothing
// more, and nothing is queued (queued delivery would queue the chunks
// read meanwhile).
func TestDeliveryInlineFromConfig(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	busy := make(chan struct{})
	done := make(chan struct{})
	var once sync.Once
	e, addr := enginetest.Listen(t, engine.Config{Runner: engine.RunnerGoroutine, Buffers: 16, BufSize: 4096, Flush: time.Millisecond,
		Delivery: engine.DeliveryInline}, srcs.ListenerConfig{}, []engine.Option{engine.WithHandler(func(c engine.Chunk) {
		if len(c.Data) > 0 {
			once.Do(func() {
				close(busy)
				<-done
			})
		}
		c.Release()
	})})
	c, _ := dialTagged(t, addr, nil)
	select {
	case <-busy:
	case <-time.After(30 * time.Second):
		t.Fatal("no chunk")
	}
	for range 10 {
		if _, err := c.Write([]byte("more bytes, read only once the handler returns")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.Stats(); st.Queued != 0 {
		t.Errorf("%d chunks queued while the inline handler was busy", st.Queued)
	}
	close(done)
	c.Close()
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// slowConsumer checks that an inline consumer that keeps every chunk
// throttles the sender through the pool, with nothing queued, and that
// everything arrives once it lets go. (How a runner stops reading while
// the pool is dry is runnertest's SlowConsumer.)
func slowConsumer(t *testing.T, runner string) {
	const buffers, bufSize = 32, 16 << 10
	h := newHarnessMode(t, runner, engine.Config{Workers: 1, Buffers: buffers, BufSize: bufSize, Flush: time.Millisecond}, true)
	h.col.setHold(true)
	c, name := h.dial()
	r := rand.New(rand.NewPCG(1, 2))
	block := make([]byte, 64<<10)
	var w sent
	write := func() error {
		for i := range block {
			block[i] = byte(r.Uint32())
		}
		n, err := c.Write(block)
		w.bytes += int64(n)
		w.crc = crc32.Update(w.crc, srcstest.Castagnoli, block[:n])
		return err
	}
	// With nothing released, the engine can take in at most the pool
	// plus the socket buffers: the sender must stall long before this.
	const limit = 512 << 20
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	var err error
	for w.bytes < limit && err == nil {
		err = write()
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: sender wrote %d bytes without being throttled (err %v)", runner, w.bytes, err)
	}
	st := h.e.Stats()
	if st.Queued != 0 {
		t.Fatalf("%s: %d chunks queued with an inline handler", runner, st.Queued)
	}
	if st.Pool.InUse > buffers || st.Queued > buffers {
		t.Fatalf("%s: %d buffers in use and %d queued with a pool of %d", runner, st.Pool.InUse, st.Queued, buffers)
	}
	t.Logf("%s: sender throttled after %d bytes; pool %d/%d in use", runner, w.bytes, st.Pool.InUse, buffers)
	// The consumer recovers: everything sent arrives, in order.
	h.col.setHold(false)
	c.SetWriteDeadline(time.Time{})
	if err := write(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	h.col.waitFor("the end after recovery", 60*time.Second, func(m map[string]*stream) bool {
		s := m[name]
		return s != nil && s.eos
	})
	if got := h.col.get(name); got.bytes != w.bytes || got.crc != w.crc {
		t.Fatalf("%s: got %d bytes crc %08x, sent %d crc %08x", runner, got.bytes, got.crc, w.bytes, w.crc)
	}
}
