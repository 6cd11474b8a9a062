package engine_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestWithAddedTellsListenersApart: two listeners, each with its own
// WithAdded hook; every connection's id is announced by the hook of the
// listener that accepted it, before any of its chunks (its end of stream
// included) reaches the handler, even a connection that sends nothing.
func TestWithAddedTellsListenersApart(t *testing.T) {
	var mu sync.Mutex
	owner := map[srcs.ID]string{} // id → the listener whose hook announced it
	var bad []string
	ended := map[string]int{} // listener → its connections' ends
	endedCh := make(chan struct{}, 16)
	e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4 << 10}, engine.WithHandler(func(c engine.Chunk) {
		mu.Lock()
		l, ok := owner[c.Source]
		if !ok {
			bad = append(bad, c.Name)
		}
		if c.Flags&srcs.EndOfStream != 0 {
			ended[l]++
		}
		mu.Unlock()
		c.Release()
		if c.Flags&srcs.EndOfStream != 0 {
			endedCh <- struct{}{}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	addrs := map[string]string{}
	for _, name := range []string{"a", "b"} {
		ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		addrs[name] = ln.Addr().String()
		hook := engine.WithAdded(func(id srcs.ID, src srcs.Source) {
			mu.Lock()
			owner[id] = name
			mu.Unlock()
		})
		if err := e.AddListener(ln, hook); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"a": 3, "b": 2}
	for name, n := range want {
		for i := range n {
			c, err := net.Dial("tcp", addrs[name])
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 { // the first sends nothing before it closes
				c.Write([]byte("some bytes"))
			}
			c.Close()
		}
	}
	for range want["a"] + want["b"] {
		select {
		case <-endedCh:
		case <-time.After(30 * time.Second):
			t.Fatalf("connections did not end: %v", ended)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("chunks before their source was announced: %v", bad)
	}
	if ended["a"] != want["a"] || ended["b"] != want["b"] {
		t.Errorf("ends by listener %v, want %v", ended, want)
	}
}

// TestAddListenerChecksOptions: options AddListener would apply to every
// connection are checked once, up front.
func TestAddListenerChecksOptions(t *testing.T) {
	e, err := engine.New(engine.Config{Buffers: 4, BufSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := e.AddListener(ln, engine.WithFlush(-time.Second)); err == nil {
		t.Fatal("a negative flush was accepted")
	}
}
