package engine_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestShutdownFromHandler: a handler (queued or inline, or the error
// handler beside it) may call Shutdown. The call returns at once, since
// the shutdown waits for that very handler to return; the shutdown then
// finishes, and a Shutdown called elsewhere waits for it and returns its
// result. Every source still ends with its end-of-stream chunk.
func TestShutdownFromHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runner  string
		inline  bool
		onError bool // the error handler calls Shutdown, on a source's error
	}{
		{"queued", engine.RunnerAuto, false, false},
		{"queued, goroutine runner", engine.RunnerGoroutine, false, false},
		{"inline", engine.RunnerAuto, true, false},
		{"inline, goroutine runner", engine.RunnerGoroutine, true, false},
		{"error handler, queued", engine.RunnerAuto, false, true},
		{"error handler, inline", engine.RunnerAuto, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			returned := make(chan error, 1)
			ends := make(chan struct{}, 16)
			var e *engine.Engine
			shutdown := func() {
				done := make(chan error, 1)
				go func() {
					select {
					case err := <-done:
						returned <- err
					case <-time.After(5 * time.Second):
						returned <- context.DeadlineExceeded
					}
				}()
				done <- e.Shutdown(context.Background())
			}
			first := true
			h := func(c engine.Chunk) {
				n := len(c.Data)
				c.Release()
				if c.Flags&srcs.EndOfStream != 0 {
					ends <- struct{}{}
					return
				}
				if !tc.onError && first && n > 0 {
					first = false // one source: its chunks come one at a time
					shutdown()
				}
			}
			opt := engine.WithHandler(h)
			if tc.inline {
				opt = engine.WithInlineHandler(h)
			}
			once := false
			e, err := engine.New(engine.Config{Runner: tc.runner, Buffers: 16, BufSize: 4096}, opt,
				engine.WithErrorHandler(func(error) {
					if tc.onError && !once {
						once = true
						shutdown()
					}
				}))
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
			defer c.Close()
			if tc.onError {
				c.(*net.TCPConn).SetLinger(0) // a reset: an error for the error handler
				c.Write([]byte("x"))
				c.Close()
			} else {
				c.Write([]byte("hello"))
			}
			select {
			case err := <-returned:
				if err != nil {
					t.Fatalf("Shutdown called from the handler: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no Shutdown from the handler")
			}
			finished := make(chan error, 1)
			go func() { finished <- e.Shutdown(context.Background()) }()
			select {
			case err := <-finished:
				if err != nil {
					t.Fatalf("the shutdown the handler began: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the shutdown the handler began never finished")
			}
			if len(ends) != 1 {
				t.Errorf("%d end-of-stream chunks, want 1", len(ends))
			}
		})
	}
}
