package engine_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// The engine fails loudly with its defaults: a misconfiguration is
// refused where it is made, and whatever stops a source or leaves data
// unread reaches the error handler, or Shutdown's result when there is
// none; never only a log, which by default discards.

// TestFramedListenerRefusedAtAdd: a framed listener whose connections the
// pool cannot serve (MaxPerSource 1) is refused by AddListener, saying
// why, instead of every connection being refused after it.
func TestFramedListenerRefusedAtAdd(t *testing.T) {
	lines, err := srcs.ParseFraming("newline")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  srcs.ListenerConfig
		opts []engine.SourceOption
	}{
		{"the listener's framer", srcs.ListenerConfig{Framer: lines}, nil},
		{"WithFraming", srcs.ListenerConfig{}, []engine.SourceOption{engine.WithFraming(lines)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096, MaxPerSource: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			ln, err := srcs.ListenTCP("127.0.0.1:0", tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			err = e.AddListener(ln, tc.opts...)
			var ce *engine.ConfigError
			if !errors.As(err, &ce) || ce.Field != "MaxPerSource" || !strings.Contains(err.Error(), "must be at least 2 for a framed source") {
				t.Fatalf("AddListener: %v; want the MaxPerSource a framed source needs", err)
			}
		})
	}
}

// TestUnheardErrorsReachShutdown: without an error handler, a source's
// error is not only logged (the default logger discards): Shutdown
// returns it.
func TestUnheardErrorsReachShutdown(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	c.(*net.TCPConn).SetLinger(0)
	c.Close() // a reset
	for c := range e.Chunks(context.Background()) {
		if c.Flags&srcs.EndOfStream != 0 {
			break
		}
	}
	err = e.Shutdown(context.Background())
	if !errors.Is(err, srcs.ErrReset) || !strings.Contains(err.Error(), "reached no error handler") {
		t.Fatalf("Shutdown: %v; want the reset, which no error handler heard", err)
	}
}

// TestStalledSourceReported: a consumer that takes chunks and never
// releases them stalls its source at its cap; the error handler hears
// so (ErrStalled), naming the source, once.
func TestStalledSourceReported(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int // MaxPerSource
	}{
		{"at its cap", 4},
		{"the pool held", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			var mu sync.Mutex
			var stalls []error
			e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096, MaxPerSource: tc.max},
				engine.WithStallAfter(50*time.Millisecond),
				engine.WithErrorHandler(func(err error) {
					mu.Lock()
					defer mu.Unlock()
					if errors.Is(err, engine.ErrStalled) {
						stalls = append(stalls, err)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var id srcs.ID
			if err := e.AddListener(ln, engine.WithAdded(func(i srcs.ID, _ srcs.Source) { id = i })); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go c.Write(make([]byte, 1<<20)) // more than the pool holds
			// Take chunks and forget to release them, until a stall is
			// reported (error handlers run inside Next in pull mode).
			var held []engine.Chunk
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(stalls)
				mu.Unlock()
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no stall reported")
				}
				// Next returns a chunk, or calls the error handler and
				// waits on: a short wait, then look again.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				ch, err := e.Next(ctx)
				cancel()
				if err == nil {
					held = append(held, ch)
				}
			}
			mu.Lock()
			var se *srcs.SourceError
			if len(stalls) != 1 || !errors.As(stalls[0], &se) || se.ID != id || !strings.Contains(stalls[0].Error(), "not released") {
				t.Errorf("stall reports %v; want one naming source %d", stalls, id)
			}
			mu.Unlock()
			if st, _ := e.SourceStats(id); st.Errors != 0 || st.LastErr != nil {
				t.Errorf("the stall counts as the source's error: %+v", st)
			}
			for i := range held {
				held[i].Release()
			}
			c.Close()
			go drain(e)
			e.Shutdown(context.Background())
		})
	}
}

// TestShutdownReportsHeldChunks: a pull-mode Shutdown while chunks taken
// with Next are held says so; the pool stays mapped until their release.
func TestShutdownReportsHeldChunks(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	src := newFiniteSource(make([]byte, 3*4096))
	if _, err := e.AddSource(src); err != nil {
		t.Fatal(err)
	}
	var held []engine.Chunk
	for len(held) < 3 {
		c, err := e.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Data) > 0 {
			held = append(held, c)
		}
	}
	for c := range e.Chunks(context.Background()) {
		if c.Flags&srcs.EndOfStream != 0 {
			break
		}
	}
	err = e.Shutdown(context.Background())
	if !errors.Is(err, engine.ErrUnread) || !strings.Contains(err.Error(), "3 chunks taken and not released") {
		t.Fatalf("Shutdown with 3 chunks held: %v", err)
	}
	if e.Pool().Stats().Closed {
		t.Fatal("the pool was unmapped under held chunks")
	}
	for i := range held {
		held[i].Release()
	}
	if !e.Pool().Stats().Closed {
		t.Fatal("the pool is still mapped after the last release")
	}
}

// TestChunksContextDrains: the context of a loop over Chunks ending (the
// signal.NotifyContext idiom) drains the engine: the sources stop, and
// the loop yields everything they read and every end-of-stream chunk,
// then ends by itself; Shutdown afterwards returns the drain's result.
func TestChunksContextDrains(t *testing.T) {
	for _, runner := range []string{engine.RunnerAuto, engine.RunnerGoroutine} {
		t.Run(runner, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			e, err := engine.New(engine.Config{Runner: runner, Buffers: 64, BufSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.AddListener(ln); err != nil {
				t.Fatal(err)
			}
			const conns, each = 20, 10000
			for range conns {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close() // held open: only the drain ends them
				if _, err := c.Write(make([]byte, each)); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			bytes, ends := 0, 0
			for c, err := range e.Chunks(ctx) {
				if err != nil {
					t.Fatalf("the loop yielded %v", err)
				}
				bytes += len(c.Data)
				if bytes == conns*each {
					cancel() // as SIGINT would, once every byte is in
				}
				if c.Flags&srcs.EndOfStream != 0 {
					ends++
					if c.Final.State != engine.Closed || c.Final.LastErr != nil {
						t.Errorf("end of %s: %+v", c.Name, c.Final)
					}
				}
			}
			if bytes != conns*each || ends != conns {
				t.Errorf("%d bytes and %d ends, want %d and %d", bytes, ends, conns*each, conns)
			}
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatalf("Shutdown after the drain: %v", err)
			}
			if !e.Pool().Stats().Closed {
				t.Error("the pool is still mapped after the drain")
			}
		})
	}
}
