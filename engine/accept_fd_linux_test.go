package engine_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"strconv"
	"sync"
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
			shutdownAtEnd(t, e)
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
			heap0, before, fds0 := heapNow(), runtime.NumGoroutine(), openFDs(t)
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
			// The uring runner keeps each socket in its workers' file
			// tables, not in the process's descriptor table: the process
			// holds the clients' descriptors and few more.
			direct, sinkFDs := 0, openFDs(t)-fds0-crowd
			for _, rs := range e.Stats().Runners {
				direct += rs.DirectFiles
			}
			switch {
			case runner == engine.RunnerURing && (direct != crowd || sinkFDs > 64):
				t.Errorf("%d of %d connections in file tables, %d descriptors for them", direct, crowd, sinkFDs)
			case runner != engine.RunnerURing && (direct != 0 || sinkFDs < crowd):
				t.Errorf("%s: %d connections in file tables, %d descriptors for %d", runner, direct, sinkFDs, crowd)
			default:
				t.Logf("%d connections in file tables; the sink's descriptors grew by %d", direct, sinkFDs)
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
// about 550 bytes (docs/decisions/0013-accept-on-the-rings.md); with a net.Conn behind each
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

// TestListenerReusePortRawAccept: two engines, one under uring and one
// under epoll, listen on one port with reuse_port and accept their
// connections as raw sockets; the kernel spreads the clients over both,
// every client's bytes reach one of them whole, and each listener counts
// what it accepted.
func TestListenerReusePortRawAccept(t *testing.T) {
	const clients, size = 64, 10000
	runners := []string{engine.RunnerURing, engine.RunnerEpoll}
	requireRunner(t, engine.RunnerURing)
	var mu sync.Mutex
	got := map[string][]byte{} // by source name: tcp://client address
	rawCount := [2]atomic.Int64{}
	var port int
	var lns [2]*srcs.Listener
	for i, runner := range runners {
		e, err := engine.New(engine.Config{Runner: runner, Buffers: 64, BufSize: 4 << 10},
			engine.WithHandler(func(c engine.Chunk) {
				mu.Lock()
				got[c.Name] = append(got[c.Name], c.Data...)
				mu.Unlock()
				c.Release()
			}))
		if err != nil {
			t.Fatal(err)
		}
		shutdownAtEnd(t, e)
		addr := "127.0.0.1:0"
		if port != 0 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		ln, err := srcs.ListenTCP(addr, srcs.ListenerConfig{ReusePort: true})
		if err != nil {
			t.Fatal(err)
		}
		port, lns[i] = ln.Addr().(*net.TCPAddr).Port, ln
		if err := e.AddListener(ln, engine.WithAdded(func(_ srcs.ID, src srcs.Source) {
			if _, ok := src.(syscall.Conn); !ok {
				rawCount[i].Add(1)
			}
		})); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]byte{}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for k := range clients {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		b := bytes.Repeat([]byte{byte('a' + k%26)}, size)
		binary.BigEndian.PutUint32(b, uint32(k))
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		want["tcp://"+c.LocalAddr().String()] = b
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := 0
		for _, b := range got {
			n += len(b)
		}
		mu.Unlock()
		if n >= clients*size {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bytes delivered after 30s", n, clients*size)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s: delivered %d bytes, not the %d it sent", name, len(got[name]), len(b))
		}
	}
	if len(got) != clients {
		t.Errorf("%d sources delivered, want %d", len(got), clients)
	}
	var accepted uint64
	for i, ln := range lns {
		st := ln.Stats()
		accepted += st.Accepted
		if st.Accepted == 0 || rawCount[i].Load() != int64(st.Accepted) {
			t.Errorf("%s listener: accepted %d, %d of them as raw sockets; want some, all raw", runners[i], st.Accepted, rawCount[i].Load())
		}
	}
	if accepted != clients {
		t.Errorf("the listeners accepted %d connections, want %d", accepted, clients)
	}
}

// shutdownAtEnd shuts e down when the test ends, failing it if the
// shutdown fails.
func shutdownAtEnd(t *testing.T, e *engine.Engine) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
}
