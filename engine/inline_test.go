package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/enginetest"
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
	forEachRunner(t, func(t *testing.T, runner string) { slowConsumer(t, runner, true) })
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
