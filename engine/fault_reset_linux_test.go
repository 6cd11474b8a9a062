package engine_test

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/engine"
)

// TestFaultResetStorm has peers connect and reset at once (SO_LINGER 0),
// half of them after a few bytes, in a tight loop for a while. Every one
// of those sources ends, the engine keeps serving, and once the storm is
// over every descriptor and goroutine it took for them is gone.
func TestFaultResetStorm(t *testing.T) {
	const storm = time.Second
	forEachRunner(t, func(t *testing.T, runner string) {
		ignore := goleak.IgnoreCurrent()
		fds0 := openFDs(t)
		h := newHarness(t, runner, engine.Config{Workers: 2, Buffers: 64, BufSize: 16 << 10})
		col := h.col
		fds1, g1 := openFDs(t), runtime.NumGoroutine()

		n := 0
		for start := time.Now(); time.Since(start) < storm; n++ {
			// Untagged: half of them must send nothing at all.
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			tc := c.(*net.TCPConn)
			if err := tc.SetLinger(0); err != nil {
				t.Fatal(err)
			}
			if n%2 == 1 {
				tc.Write([]byte("a few bytes, then a reset"))
			}
			tc.Close()
		}
		waitCount(t, runner+": reset connections not yet ended", 0, func() int { return n - col.endedCount() })
		waitCount(t, runner+": live sources after the storm", 0, func() int { return len(h.e.Stats().Sources) })
		waitCount(t, runner+": descriptors open after the storm", fds1, func() int { return openFDs(t) })
		waitCount(t, runner+": goroutines after the storm", g1, runtime.NumGoroutine)

		// The engine still serves.
		type peer struct {
			name string
			w    sent
		}
		peers := make([]peer, 8)
		var wg sync.WaitGroup
		for i := range peers {
			c, name := h.dial()
			peers[i].name = name
			wg.Go(func() {
				w, err := sendRandom(c, uint64(i), 256<<10)
				if err != nil {
					t.Error(err)
				}
				peers[i].w = w
			})
		}
		wg.Wait()
		waitCount(t, runner+": streams not yet ended after the storm", 0, func() int { return n + len(peers) - col.endedCount() })
		col.mu.Lock()
		for _, p := range peers {
			s := col.streams[p.name]
			if s.bytes != p.w.bytes || s.crc != p.w.crc || len(s.errs) != 0 {
				t.Errorf("%s: %s after the storm: got %d bytes crc %08x errors %v; sent %d crc %08x",
					runner, p.name, s.bytes, s.crc, s.errs, p.w.bytes, p.w.crc)
			}
		}
		resets := col.resets
		col.mu.Unlock()
		t.Logf("%s: %d connections reset in %v, %d reported as resets, every one ended; descriptors (%d) and goroutines (%d) back to where they were",
			runner, n, storm, resets, fds1, g1)

		h.shutdown()
		goleak.VerifyNone(t, ignore)
		waitCount(t, runner+": descriptors open after shutdown", fds0, func() int { return openFDs(t) })
	})
}
