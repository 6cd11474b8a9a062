package engine_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// books is a source's state in TestSourceState: changed by the handler
// with no lock, which the race detector checks.
type books struct {
	id      srcs.ID
	records int
	bytes   int
	closed  bool
}

// TestSourceState: on every runner, with several handler goroutines, each
// connection of a listener gets its own value from WithSourceState, every
// chunk of it carries that value, its end-of-stream chunk too, and the
// handler keeps per-source counts in it without a lock.
func TestSourceState(t *testing.T) {
	const conns, lines = 12, 400
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		var mu sync.Mutex
		var all []*books
		closed := make(chan *books, conns)
		e, err := engine.New(engine.Config{Runner: runner, Handlers: 4, Buffers: 64},
			engine.WithHandler(func(c engine.Chunk) {
				defer c.Release()
				b := c.State().(*books)
				if b.id != c.Source {
					t.Errorf("source %d got the state of source %d", c.Source, b.id)
				}
				if c.Flags&srcs.EndOfStream != 0 {
					b.closed = true
					if c.Final.Bytes != uint64(b.bytes) {
						t.Errorf("source %d: counted %d bytes, Final says %d", c.Source, b.bytes, c.Final.Bytes)
					}
					closed <- b
					return
				}
				b.bytes += len(c.Data)
				b.records += bytes.Count(c.Data, []byte("\n"))
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Shutdown(context.Background())
		ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		fr, _ := srcs.ParseFraming("newline")
		err = e.AddListener(ln, engine.WithFraming(fr), engine.WithSourceState(func(id srcs.ID, name string) any {
			b := &books{id: id}
			mu.Lock()
			all = append(all, b)
			mu.Unlock()
			return b
		}))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range conns {
			wg.Go(func() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Error(err)
					return
				}
				for i := range lines {
					c.Write([]byte("record " + string(rune('a'+i%26)) + "\n"))
				}
				c.Close()
			})
		}
		wg.Wait()
		for range conns {
			select {
			case b := <-closed:
				if b.records != lines || !b.closed {
					t.Errorf("source %d: %d records, closed %v; want %d", b.id, b.records, b.closed, lines)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("not every source ended")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(all) != conns {
			t.Errorf("%d states made for %d connections", len(all), conns)
		}
	})
}
