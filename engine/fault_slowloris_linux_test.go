package engine_test

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// lineBlock is a block of newline-terminated lines of random letters,
// which a framed bulk sender repeats.
var lineBlock = sync.OnceValue(func() []byte {
	b := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{5}).Read(b)
	r := rand.New(rand.NewPCG(5, 6))
	next := r.IntN(2048)
	for i := range b {
		if i == next || i == len(b)-1 {
			b[i] = '\n'
			next = i + 1 + r.IntN(2048)
			continue
		}
		b[i] = 'a' + b[i]%26
	}
	return b
})

// slowloris writes one letter every 100ms to 1s until stop is closed, then
// a newline, and closes the connection. The first letter goes at once.
func slowloris(c net.Conn, seed uint64, stop <-chan struct{}, w *sent) error {
	defer c.Close()
	r := rand.New(rand.NewPCG(seed, 1))
	write := func(b byte) error {
		if _, err := c.Write([]byte{b}); err != nil {
			return err
		}
		w.bytes++
		w.crc = crc32.Update(w.crc, srcstest.Castagnoli, []byte{b})
		return nil
	}
	for {
		if err := write('a' + byte(r.IntN(26))); err != nil {
			return err
		}
		t := time.NewTimer(100*time.Millisecond + time.Duration(r.IntN(900))*time.Millisecond)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return write('\n')
		}
	}
}

// TestFaultSlowloris surrounds one well-behaved stream with connections
// that trickle a byte every 100ms to 1s, raw and through a newline-framed
// listener. The stream completes byte-exact and so do the trickles; its
// rate is logged, and the pool buffers the trickling lanes pin are
// bounded: a raw lane gives its buffer back at each flush, and a framed
// one, holding part of a line, parks that part outside the pool after a
// flush timeout (srcs.Frames.Park), so slow senders cannot drain the pool.
func TestFaultSlowloris(t *testing.T) {
	const (
		lanes  = 100
		window = 1200 * time.Millisecond // the trickles' life
	)
	forEachRunner(t, func(t *testing.T, runner string) {
		for _, mode := range []string{"raw", "newline"} {
			framed := mode == "newline"
			t.Run(mode, func(t *testing.T) {
				h := newHarness(t, runner, engine.Config{Workers: 2, Buffers: 256, BufSize: 16 << 10})
				lc := srcs.ListenerConfig{}
				if framed {
					lc.Framer = srcs.Newline{}
				}
				ln, err := srcs.ListenTCP("127.0.0.1:0", lc)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.e.AddListener(ln); err != nil {
					t.Fatal(err)
				}
				dial := func() (net.Conn, string) { return dialTagged(t, ln.Addr().String(), nil) }

				start := time.Now()
				stop := make(chan struct{})
				slow := map[string]*sent{}
				// The trickles' source names, unique while they are open:
				// no connection closes before they do.
				slowNames := map[string]bool{}
				var wg sync.WaitGroup
				for i := range lanes {
					c, name := dial()
					slowNames["tcp://"+c.LocalAddr().String()] = true
					w := &sent{}
					slow[name] = w
					wg.Go(func() {
						if err := slowloris(c, uint64(i), stop, w); err != nil {
							t.Errorf("slowloris %s: %v", name, err)
						}
					})
				}
				// Sample what the trickling lanes hold while they live.
				var maxPinned, sumPinned, samples int
				sampled := make(chan struct{})
				go func() {
					defer close(sampled)
					tick := time.NewTicker(20 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						pinned := 0
						for _, s := range h.e.Stats().Sources {
							if slowNames[s.Name] {
								pinned += s.Held
							}
						}
						maxPinned = max(maxPinned, pinned)
						sumPinned += pinned
						samples++
					}
				}()

				// The well-behaved stream, while the trickles run.
				data := bytes.Repeat(bulkBlock(), 32)
				if framed {
					data = bytes.Repeat(lineBlock(), 32)
				}
				c, name := dial()
				sendStart := time.Now()
				if _, err := c.Write(data); err != nil {
					t.Fatal(err)
				}
				c.Close()
				h.col.waitFor("the well-behaved stream's end", 120*time.Second, func(m map[string]*stream) bool {
					s := m[name]
					return s != nil && s.eos
				})
				rate := float64(len(data)) / time.Since(sendStart).Seconds()
				if got := h.col.get(name); got.bytes != int64(len(data)) || got.crc != crc32.Checksum(data, srcstest.Castagnoli) || len(got.errs) != 0 {
					t.Fatalf("%s %s: the well-behaved stream got %d of %d bytes (errors %v) or a bad crc", runner, mode, got.bytes, len(data), got.errs)
				}

				if rest := window - time.Since(start); rest > 0 {
					time.Sleep(rest) // the trickles' planned life, not synchronisation
				}
				close(stop)
				<-sampled
				wg.Wait()
				h.col.waitFor("every trickle's end", 60*time.Second, func(m map[string]*stream) bool {
					for n := range slow {
						if s := m[n]; s == nil || !s.eos {
							return false
						}
					}
					return true
				})
				var trickled int64
				for n, w := range slow {
					trickled += w.bytes
					if got := h.col.get(n); got.bytes != w.bytes || got.crc != w.crc || len(got.errs) != 0 {
						t.Errorf("%s %s: trickle %s: got %d bytes crc %08x errors %v; sent %d crc %08x", runner, mode, n, got.bytes, got.crc, got.errs, w.bytes, w.crc)
					}
				}
				mean := float64(sumPinned) / float64(max(samples, 1))
				t.Logf("%s %s: stream of %d MiB at %.0f MiB/s beside %d trickling lanes (%d bytes in %v); "+
					"they pinned %.1f pool buffers on average, %d at most, of 256",
					runner, mode, len(data)>>20, rate/(1<<20), lanes, trickled, window, mean, maxPinned)
				// Raw lanes hand their buffer back at each flush, framed
				// ones park their part of a line; all of them may hold
				// one at once (their first bytes arrive together), but
				// not for long.
				if mean > lanes/4 {
					t.Errorf("%s %s: trickling lanes pinned %.1f buffers on average", runner, mode, mean)
				}
			})
		}
	})
}
