package engine_test

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestListenerIdleCrowdIsBare holds 5,000 idle connections on a plain
// listener and checks what each costs: under the runners that read
// descriptors (uring, epoll) no net.Conn stands behind an accepted
// source, no goroutine per connection exists, no buffer is held, and the
// Go heap grows by at most idleHeapBound per connection. The clients are
// raw sockets, so that the heap the test measures is the engine's.
func TestListenerIdleCrowdIsBare(t *testing.T) {
	const crowd = 5000
	for _, runner := range []string{engine.RunnerURing, engine.RunnerEpoll} {
		t.Run(runner, func(t *testing.T) {
			requireRunner(t, runner)
			e, err := engine.New(engine.Config{Runner: runner, Buffers: 16, BufSize: 4 << 10},
				engine.WithHandler(func(c engine.Chunk) { c.Release() }))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := e.Shutdown(ctx); err != nil {
					t.Error(err)
				}
			}()
			ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var added, conns atomic.Int64
			if err := e.AddListener(ln, engine.WithAdded(func(_ srcs.ID, src srcs.Source) {
				added.Add(1)
				if _, ok := src.(syscall.Conn); ok {
					conns.Add(1) // a net.Conn (or its wrapper) is behind it
				}
			})); err != nil {
				t.Fatal(err)
			}
			to := ln.Addr().(*net.TCPAddr)
			sa := &unix.SockaddrInet4{Port: to.Port, Addr: [4]byte(to.IP.To4())}
			clients := make([]int, 0, crowd)
			defer func() {
				for _, fd := range clients {
					unix.Close(fd)
				}
			}()
			heap0, before := heapNow(), runtime.NumGoroutine()
			for range crowd {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				clients = append(clients, fd)
				if err := unix.Connect(fd, sa); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for running(e) < crowd {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d connections running after 30s", running(e), crowd)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := conns.Load(); n != 0 {
				t.Errorf("%d of %d accepted sources have a net.Conn behind them", n, added.Load())
			}
			if grew := runtime.NumGoroutine() - before; grew > 50 {
				t.Errorf("%d goroutines more with %d idle connections", grew, crowd)
			}
			if st := e.Pool().Stats(); st.InUse != 0 {
				t.Errorf("%d buffers held by idle connections", st.InUse)
			}
			if per := (heapNow() - heap0) / crowd; per > idleHeapBound {
				t.Errorf("the Go heap grew by %d bytes per idle connection, more than %d", per, idleHeapBound)
			} else {
				t.Logf("the Go heap grew by %d bytes per idle connection", per)
			}
		})
	}
}

// idleHeapBound is what an idle accepted connection may cost the Go heap:
// its source record, lane, pool account, name and table entries come to
// about 550 bytes (README: Idle connections); with a net.Conn behind each
// and the records as they were, they came to about 1,150.
const idleHeapBound = 800

// heapNow returns the Go heap in use after a collection.
func heapNow() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// running counts the engine's running sources.
func running(e *engine.Engine) int {
	n := 0
	for _, s := range e.Stats().Sources {
		if s.State == engine.Running {
			n++
		}
	}
	return n
}
