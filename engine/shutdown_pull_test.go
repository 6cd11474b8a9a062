package engine_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// finiteSource reads data and ends cleanly; closed is closed by its first
// Close, which the engine calls once it has read everything.
type finiteSource struct {
	r      *bytes.Reader
	once   sync.Once
	closed chan struct{}
}

func newFiniteSource(data []byte) *finiteSource {
	return &finiteSource{r: bytes.NewReader(data), closed: make(chan struct{})}
}

func (s *finiteSource) Name() string               { return "finite" }
func (s *finiteSource) Open(context.Context) error { return nil }
func (s *finiteSource) Read(p []byte) (int, error) { return s.r.Read(p) }
func (s *finiteSource) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// TestShutdownLeavesQueuedChunksToNext: in pull mode, Shutdown with data
// chunks queued and nobody reading returns at once, says so (ErrUnread),
// drops nothing, and leaves them to Next (or Chunks) in order, up to the
// end of stream; the pool is unmapped at the release of the last chunk.
func TestShutdownLeavesQueuedChunksToNext(t *testing.T) {
	const bufSize = 4096
	data := make([]byte, 40*bufSize+100)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name   string
		held   int  // chunks taken before Shutdown and held across it
		ranged bool // drain with Chunks instead of Next
		// paused shuts down while the watermarks hold reading paused,
		// before the source has read everything.
		paused bool
	}{
		{"nothing taken, then Next", 0, false, false},
		{"three held across Shutdown, then Next", 3, false, false},
		{"nothing taken, then Chunks", 0, true, false},
		{"paused, then Chunks", 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			cfg := engine.Config{Buffers: 64, BufSize: bufSize, MaxPerSource: 64}
			if tc.paused {
				cfg.QueueHigh, cfg.QueueLow = 8, 4
			}
			e, err := engine.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			src := newFiniteSource(data)
			if _, err := e.AddSource(src); err != nil {
				t.Fatal(err)
			}
			var got []byte
			var seq uint64
			var held []engine.Chunk
			eos := false
			take := func(c engine.Chunk) {
				if c.Seq != seq {
					t.Fatalf("chunk %d after %d", c.Seq, seq-1)
				}
				seq++
				got = append(got, c.Data...)
				eos = eos || c.Flags&srcs.EndOfStream != 0
			}
			for range tc.held {
				c, err := e.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				take(c)
				held = append(held, c)
			}
			if tc.paused {
				waitPaused(t, e)
			} else {
				<-src.closed // the source read everything and ended
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e.Shutdown(ctx); !errors.Is(err, engine.ErrUnread) || !strings.Contains(err.Error(), "queued and not taken") {
				t.Fatalf("shutdown with chunks queued and no reader: %v; want ErrUnread, saying they are queued", err)
			}
			if tc.ranged {
				for c, err := range e.Chunks(context.Background()) {
					if err != nil {
						t.Fatal(err)
					}
					take(c)
				}
			} else {
				for {
					c, err := e.Next(context.Background())
					if errors.Is(err, engine.ErrClosed) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					take(c)
					c.Release()
				}
			}
			want := data
			if tc.paused {
				want = data[:min(len(got), len(data))] // what was read before the stop
				if len(got) < 8*bufSize {
					t.Fatalf("after shutdown: %d bytes, want at least the %d queued when reading paused", len(got), 8*bufSize)
				}
			}
			if !bytes.Equal(got, want) || !eos {
				t.Fatalf("after shutdown: %d bytes (end of stream %v), want %d", len(got), eos, len(want))
			}
			for i, c := range held {
				if e.Pool().Stats().Closed {
					t.Fatalf("pool unmapped with %d chunks still held", len(held)-i)
				}
				c.Release()
			}
			if st := e.Pool().Stats(); !st.Closed || st.InUse != 0 {
				t.Fatalf("pool after the last release: closed %v, %d in use", st.Closed, st.InUse)
			}
			if tot := e.Totals(); tot.Delivered != tot.Chunks {
				t.Fatalf("%d chunks emitted, %d delivered", tot.Chunks, tot.Delivered)
			}
		})
	}
}

// TestChunksEndsWithShutdown: a loop over Chunks on one goroutine ends
// by itself when another shuts the engine down, and a break releases the
// chunk the body was given.
func TestChunksEndsWithShutdown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakAt int // break out of the loop at this data chunk; 0: never
	}{
		{"ranged to the end", 0},
		{"break", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096, MaxPerSource: 16})
			if err != nil {
				t.Fatal(err)
			}
			src := newFiniteSource(make([]byte, 5*4096))
			if _, err := e.AddSource(src); err != nil {
				t.Fatal(err)
			}
			shut := make(chan error, 1)
			n := 0
			for c, err := range e.Chunks(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				if c.Flags&srcs.EndOfStream != 0 {
					go func() { shut <- e.Shutdown(context.Background()) }()
					continue
				}
				n++
				if n == tc.breakAt {
					break
				}
			}
			if tc.breakAt != 0 {
				// Once the lane has read the end of the source and given
				// back the buffer it read it into, the chunks the loop never
				// took hold the only buffers: one more is the chunk in
				// hand at the break.
				waitUntil(t, "the source's lane to end", func() bool {
					lanes := 0
					for _, rs := range e.Overview().Runners {
						lanes += rs.Lanes
					}
					return lanes == 0
				})
				if st := e.Pool().Stats(); st.InUse > 5-tc.breakAt {
					t.Fatalf("%d buffers in use after a break at chunk %d of 5", st.InUse, tc.breakAt)
				}
				// The chunks after the break are left queued, and
				// Shutdown says so.
				if err := e.Shutdown(context.Background()); !errors.Is(err, engine.ErrUnread) {
					t.Fatalf("shutdown after a break with chunks queued: %v; want ErrUnread", err)
				}
				return
			}
			if err := <-shut; err != nil {
				t.Fatal(err)
			}
			if st := e.Pool().Stats(); !st.Closed {
				t.Fatalf("pool not unmapped after the loop: %+v", st)
			}
		})
	}
}
