package engine_test

import (
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// seededSender writes a seeded random stream of a set length to a
// connection, and can be stopped by a write deadline and resumed.
type seededSender struct {
	c       *net.TCPConn
	name    string
	r       *rand.ChaCha8
	left    int64  // bytes not yet generated
	pending []byte // generated, not yet written
	block   []byte
	w       sent
}

func newSeededSender(c *net.TCPConn, name string, seed uint64, total int64) *seededSender {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	return &seededSender{c: c, name: name, r: rand.NewChaCha8(key), left: total, block: make([]byte, 64<<10)}
}

// write writes until the stream is done or one Write makes no progress for
// stall; it reports whether it stalled. Partly written blocks resume
// where they stopped.
func (s *seededSender) write(stall time.Duration) (stalled bool, err error) {
	for {
		if len(s.pending) == 0 {
			if s.left == 0 {
				return false, nil
			}
			n := int(min(s.left, int64(len(s.block))))
			s.r.Read(s.block[:n])
			s.pending, s.left = s.block[:n], s.left-int64(n)
		}
		if stall > 0 {
			s.c.SetWriteDeadline(time.Now().Add(stall))
		} else {
			s.c.SetWriteDeadline(time.Time{})
		}
		n, err := s.c.Write(s.pending)
		s.w.bytes += int64(n)
		s.w.crc = crc32.Update(s.w.crc, srcstest.Castagnoli, s.pending[:n])
		s.pending = s.pending[n:]
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return true, nil
		case err != nil:
			return false, err
		}
	}
}

// memory returns the resident set size, and the Go heap and stacks in
// use, after a collection that hands free memory back to the system, so
// that garbage does not count.
func memory(t *testing.T) (rss, goMem int64) {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return rssBytes(t), int64(ms.HeapInuse + ms.StackInuse)
}

// socketBufferMax reads the largest send plus receive buffer a loopback
// TCP connection can autotune to: what a sender can have in flight while
// the engine reads nothing.
func socketBufferMax(t *testing.T) int64 {
	t.Helper()
	var total int64
	for _, f := range []string{"/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(b))
		n, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// TestFaultConsumerHoldsChunks has the consumer take chunks and keep them:
// the pool empties, reads stop, and the senders stall with no more sent
// than the pool and their sockets' buffers hold, while the process's
// memory stays flat. When the consumer lets go, everything arrives
// byte-exact.
func TestFaultConsumerHoldsChunks(t *testing.T) {
	const (
		buffers, bufSize = 32, 16 << 10
		senders          = 4
		offered          = 16 << 20 // per sender; far more than gets out while the consumer holds on
		stall            = 300 * time.Millisecond
	)
	sockMax := socketBufferMax(t)
	forEachRunner(t, func(t *testing.T, runner string) {
		h := newHarness(t, runner, engine.Config{Workers: 2, Buffers: buffers, BufSize: bufSize, Flush: time.Millisecond})
		h.col.setHold(true)
		rss0, go0 := memory(t)
		ss := make([]*seededSender, senders)
		for i := range ss {
			c, name := h.dial()
			ss[i] = newSeededSender(c, name, uint64(i), offered)
		}
		var wg sync.WaitGroup
		for _, s := range ss {
			wg.Go(func() {
				if stalled, err := s.write(stall); err != nil || !stalled {
					t.Errorf("%s: sender %s not throttled after %d of %d bytes (err %v)", runner, s.name, s.w.bytes, int64(offered), err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		// Whatever the senders got out fills the pool: with nothing
		// released, reading stops there.
		waitUntil(t, "the pool to empty", func() bool { return h.e.Pool().Stats().InUse == buffers })
		st := h.e.Stats()
		rss1, go1 := memory(t)
		var sentTotal, read int64
		for _, s := range ss {
			sentTotal += s.w.bytes
		}
		for _, s := range st.Sources {
			read += int64(s.Bytes)
		}
		h.col.mu.Lock()
		held := len(h.col.held)
		h.col.mu.Unlock()
		t.Logf("%s: senders stalled after %d bytes of %d offered (a socket pair may buffer %d); engine read %d bytes, "+
			"pool %d/%d in use, consumer holds %d chunks, %d queued; Go heap and stacks %+d KiB, RSS %+d KiB (race detector: %v)",
			runner, sentTotal, senders*int64(offered), sockMax, read, st.Pool.InUse, buffers, held, st.Queued,
			(go1-go0)>>10, (rss1-rss0)>>10, raceBuild)
		if read > buffers*bufSize {
			t.Errorf("%s: the engine read %d bytes with the consumer holding everything; the pool holds %d", runner, read, buffers*bufSize)
		}
		if st.Pool.InUse > buffers || held > buffers {
			t.Errorf("%s: %d buffers in use, %d chunks held, with a pool of %d", runner, st.Pool.InUse, held, buffers)
		}
		if bound := buffers*bufSize + senders*sockMax; sentTotal > bound {
			t.Errorf("%s: senders got %d bytes out, more than the pool and their sockets hold (%d)", runner, sentTotal, bound)
		}
		// Whatever the senders got out sits in the pool (mapped before
		// the first measurement) or in kernel socket buffers, not in the
		// process: its memory must grow by far less than the senders got
		// out, let alone what they offered. Under the race detector the
		// resident set also holds the detector's own memory, which
		// grows by tens of MiB after tests with thousands of
		// connections; the Go heap and stacks are what the engine could
		// grow there.
		limit := min(sentTotal/2, 8<<20)
		if grew := go1 - go0; grew > limit {
			t.Errorf("%s: the Go heap and stacks grew by %d KiB while the senders got %d KiB out", runner, grew>>10, sentTotal>>10)
		}
		if grew := rss1 - rss0; !raceBuild && grew > limit {
			t.Errorf("%s: RSS grew by %d KiB while the senders got %d KiB out", runner, grew>>10, sentTotal>>10)
		}

		// The consumer lets go: the rest flows, and every byte arrives.
		h.col.setHold(false)
		for _, s := range ss {
			wg.Go(func() {
				if _, err := s.write(0); err != nil {
					t.Errorf("%s: sender %s: %v", runner, s.name, err)
				}
				s.c.Close()
			})
		}
		wg.Wait()
		h.col.waitFor("every stream's end", 120*time.Second, func(m map[string]*stream) bool {
			for _, s := range ss {
				if st := m[s.name]; st == nil || !st.eos {
					return false
				}
			}
			return true
		})
		for _, s := range ss {
			if got := h.col.get(s.name); got.bytes != s.w.bytes || got.crc != s.w.crc || s.w.bytes != offered {
				t.Errorf("%s: %s: got %d bytes crc %08x; sent %d of %d, crc %08x", runner, s.name, got.bytes, got.crc, s.w.bytes, int64(offered), s.w.crc)
			}
		}
	})
}
