package runnertest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// dgRig builds a Rig for datagram lanes: its emitter checks their framing
// (Rig.Dgrams), and the runner has two workers where it has workers, so
// lanes spread over them.
func dgRig(t *testing.T, newRunner New, bufSize, buffers int) *Rig {
	t.Helper()
	return NewRig(t, newRunner, RigConfig{
		Pool:      pool.Config{BufSize: bufSize, Buffers: buffers},
		Runner:    contract.RunnerConfig{Workers: 2},
		Datagrams: true,
	})
}

// UDP binds a UDP source, adds it as a lane and dials it. The test's
// cleanup closes the client.
func (g *Rig) UDP(cfg srcs.UDPConfig, flush time.Duration) (*srcs.UDPSource, *net.UDPConn, *contract.Lane) {
	g.t.Helper()
	cfg.Addr = "127.0.0.1:0"
	s, err := srcs.ListenUDP(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	l := g.Add(s, flush)
	c, err := net.DialUDP("udp", nil, s.LocalAddr().(*net.UDPAddr))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { c.Close() })
	return s, c, l
}

// kernelDrops returns what the kernel dropped for s, where it says.
func kernelDrops(t *testing.T, s *srcs.UDPSource) int {
	t.Helper()
	n, err := s.Drops()
	if runtime.GOOS != "linux" && errors.Is(err, errors.ErrUnsupported) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// dgramPayload is datagram i of a test: its index, then seeded bytes.
func dgramPayload(i, size int) []byte {
	p := make([]byte, max(size, 4))
	binary.LittleEndian.PutUint32(p, uint32(i))
	rng := rand.New(rand.NewPCG(uint64(i), 0xd6))
	for j := 4; j < len(p); j++ {
		p[j] = byte(rng.Uint32())
	}
	return p
}

// TestDatagrams runs the datagram cases against the runners newRunner
// makes, in the manner of testing/fstest.TestFS: every runner that drives
// datagram sockets passes the same cases. Of o, only DropLowerBound
// matters here: the runner learns a dropped datagram's real length
// unless it says otherwise.
func TestDatagrams(t *testing.T, newRunner New, o Options) {
	t.Run("InOrder", func(t *testing.T) {
		for _, tc := range []struct {
			name             string
			bufSize, maxSize int
		}{
			{"Packed", 16 << 10, 8 << 10},
			{"DefaultLimit", 64 << 10, 0},
		} {
			t.Run(tc.name, func(t *testing.T) { testDatagramsInOrder(t, newRunner, tc.bufSize, tc.maxSize) })
		}
	})
	t.Run("Fill", func(t *testing.T) { testDatagramFill(t, newRunner) })
	t.Run("Burst", func(t *testing.T) { testDatagramBurst(t, newRunner) })
	t.Run("TooLarge", func(t *testing.T) { testDatagramTooLarge(t, newRunner, !o.DropLowerBound) })
	t.Run("Flush", func(t *testing.T) { testDatagramFlush(t, newRunner) })
	t.Run("RemoveIdle", func(t *testing.T) { testDatagramRemoveIdle(t, newRunner) })
	t.Run("RemovePaused", func(t *testing.T) { testDatagramRemovePaused(t, newRunner) })
}

// testDatagramsInOrder sends 200 datagrams of random sizes, in windows so
// that the socket's receive buffer never overflows, and checks that the
// lane delivers each one whole and in order. Should the kernel drop some
// anyway, Drops must account for them.
func testDatagramsInOrder(t *testing.T, newRunner New, bufSize, maxSize int) {
	g := dgRig(t, newRunner, bufSize, 16)
	s, c, l := g.UDP(srcs.UDPConfig{MaxDatagram: maxSize}, 2*time.Millisecond)
	const total, window = 200, 10
	rng := rand.New(rand.NewPCG(7, uint64(bufSize)))
	for i := 0; i < total; {
		for end := i + window; i < end; i++ {
			size := 1 + rng.IntN(1400)
			if i%10 == 9 {
				size = 1 + rng.IntN(8<<10)
			}
			if _, err := c.Write(dgramPayload(i, size)); err != nil {
				t.Fatal(err)
			}
		}
		g.WaitUntil(fmt.Sprintf("datagrams up to %d", i), func() bool {
			return len(g.Dgrams.Datagrams(l.ID))+kernelDrops(t, s) >= i
		})
	}
	got := g.Dgrams.Datagrams(l.ID)
	drops := kernelDrops(t, s)
	if len(got)+drops != total {
		t.Errorf("delivered %d and the kernel dropped %d of %d", len(got), drops, total)
	}
	if drops > 0 {
		t.Logf("the kernel dropped %d datagrams", drops)
	}
	last := -1
	for k, p := range got {
		i := int(binary.LittleEndian.Uint32(p))
		if i <= last || i >= total || !bytes.Equal(p, dgramPayload(i, len(p))) {
			t.Fatalf("datagram %d (%d bytes) is not datagram %d of what was sent, or out of order", k, len(p), last+1)
		}
		last = i
	}
	if d := g.Dgrams.Drops(l.ID); len(d) != 0 {
		t.Errorf("runner dropped datagrams of sizes %v", d)
	}
	chunks := g.Dgrams.Chunks(l.ID)
	t.Logf("%d datagrams in %d chunks", len(got), len(chunks))
}

// testDatagramTooLarge sends, into 8 KiB buffers, a datagram that exactly
// fills one, one that is too large, and a small one: the first fills a
// chunk that is not Partial, the second is dropped and reported, and the
// lane goes on to deliver the third.
func testDatagramTooLarge(t *testing.T, newRunner New, exactDrops bool) {
	g := dgRig(t, newRunner, 8<<10, 4)
	_, c, l := g.UDP(srcs.UDPConfig{}, 0)
	exact := dgramPayload(0, 8<<10-srcs.DatagramHeaderLen)
	for _, p := range [][]byte{exact, dgramPayload(1, 9000), dgramPayload(2, 100)} {
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	g.WaitUntil("the datagram after the large one", func() bool { return len(g.Dgrams.Datagrams(l.ID)) >= 2 })
	got := g.Dgrams.Datagrams(l.ID)
	if len(got) != 2 || !bytes.Equal(got[0], exact) || !bytes.Equal(got[1], dgramPayload(2, 100)) {
		t.Errorf("delivered %d datagrams, want the exact fit and the small one", len(got))
	}
	drops := g.Dgrams.Drops(l.ID)
	switch {
	case len(drops) != 1:
		t.Errorf("drops reported: %v, want one", drops)
	case exactDrops && drops[0] != 9000:
		t.Errorf("drop of size %d reported, want 9000", drops[0])
	case drops[0] <= 8<<10-srcs.DatagramHeaderLen:
		t.Errorf("drop of size %d reported, want more than the room", drops[0])
	}
	if ch := g.Dgrams.Chunks(l.ID); len(ch) != 2 || ch[0].Flags != srcs.Datagrams || ch[1].Flags != srcs.Datagrams|srcs.Partial {
		t.Errorf("chunks %+v: want a full chunk, then a partial one", ch)
	}
	if lr := g.Dgrams.Lane(l.ID); lr.Finished {
		t.Errorf("lane finished (%v) after a dropped datagram", lr.Err)
	}
}

// testDatagramFlush sends three small datagrams to a lane with a flush
// timeout: they come out together in one partial chunk, after the timeout.
func testDatagramFlush(t *testing.T, newRunner New) {
	const flush = 50 * time.Millisecond
	g := dgRig(t, newRunner, 64<<10, 4)
	_, c, l := g.UDP(srcs.UDPConfig{MaxDatagram: 1500}, flush)
	for i := range 3 {
		if _, err := c.Write(dgramPayload(i, 10+i)); err != nil {
			t.Fatal(err)
		}
	}
	g.WaitUntil("three datagrams", func() bool { return len(g.Dgrams.Datagrams(l.ID)) >= 3 })
	ch := g.Dgrams.Chunks(l.ID)
	if len(ch) == 0 || ch[0].Flags != srcs.Datagrams|srcs.Partial || ch[0].Hold < flush*2/3 {
		t.Fatalf("chunks %+v: want a partial chunk held about %v", ch, flush)
	}
	if ch[0].Datagrams != 3 {
		t.Logf("chunks %+v: the datagrams did not share one chunk", ch)
	}
	// The recorder releases each buffer just after it has decoded it.
	g.WaitUntil("no buffer held after the flush", func() bool { return g.Pool.Stats().InUse == 0 })
}

// testDatagramRemoveIdle removes a lane that holds no buffer.
func testDatagramRemoveIdle(t *testing.T, newRunner New) {
	g := dgRig(t, newRunner, 16<<10, 4)
	_, _, l := g.UDP(srcs.UDPConfig{}, time.Hour)
	_, c2, l2 := g.UDP(srcs.UDPConfig{}, 0)
	// A round trip on another lane shows the runner is up and idle.
	c2.Write([]byte("ping"))
	g.WaitUntil("ping", func() bool { return len(g.Dgrams.Datagrams(l2.ID)) == 1 })
	g.R.Remove(l)
	if lr := g.Finish(l); !errors.Is(lr.Err, srcs.ErrStopped) || lr.Chunks != 0 {
		t.Errorf("Finish(%v) after %d chunks, want srcs.ErrStopped and none", lr.Err, lr.Chunks)
	}
	g.R.Remove(l) // after Finish: a no-op
	g.WaitUntil("no buffer held by idle lanes", func() bool { return g.Pool.Stats().InUse == 0 })
}

// testDatagramRemovePaused removes a lane holding a datagram while the
// runner is paused: the datagram comes out as a partial chunk, then
// ErrStopped. The runner is closed while still paused.
func testDatagramRemovePaused(t *testing.T, newRunner New) {
	g := dgRig(t, newRunner, 16<<10, 4)
	_, c, l := g.UDP(srcs.UDPConfig{MaxDatagram: 1000}, time.Hour)
	_, c2, _ := g.UDP(srcs.UDPConfig{MaxDatagram: 1000}, time.Hour)
	c.Write([]byte("first"))
	c2.Write([]byte("other"))
	g.WaitUntil("both datagrams to be read", func() bool {
		return g.Pool.Stats().InUse == 2 && g.R.Stats().Reads >= 2
	})
	g.R.SetPaused(true)
	c.Write([]byte("second"))
	c2.Write([]byte("more"))
	g.R.Remove(l)
	lr := g.Finish(l)
	if !errors.Is(lr.Err, srcs.ErrStopped) {
		t.Errorf("Finish(%v), want srcs.ErrStopped", lr.Err)
	}
	got := g.Dgrams.Datagrams(l.ID)
	// "second" may have been read by a read already under way.
	if len(got) == 0 || string(got[0]) != "first" || len(got) > 2 {
		t.Errorf("delivered %q, want \"first\" (and maybe \"second\")", got)
	}
	if ch := g.Dgrams.Chunks(l.ID); len(ch) == 0 || ch[0].Flags != srcs.Datagrams|srcs.Partial {
		t.Errorf("chunks %+v, want a partial datagram chunk", ch)
	}
}

// testDatagramFill sends 48 datagrams of 1000 bytes to a lane whose limit
// is 1000 and whose flush timeout never passes: each 16 KiB buffer takes 16
// of them (16064 bytes framed), and is emitted as soon as less than 1000
// bytes of room are left, before a datagram could be cut short.
func testDatagramFill(t *testing.T, newRunner New) {
	g := dgRig(t, newRunner, 16<<10, 8)
	s, c, l := g.UDP(srcs.UDPConfig{MaxDatagram: 1000}, time.Hour)
	const total = 48
	for i := range total {
		if _, err := c.Write(dgramPayload(i, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	g.WaitUntil("every datagram", func() bool {
		return len(g.Dgrams.Datagrams(l.ID))+kernelDrops(t, s) >= total
	})
	if d := g.Dgrams.Drops(l.ID); len(d) != 0 {
		t.Fatalf("runner dropped datagrams of sizes %v", d)
	}
	if drops := kernelDrops(t, s); drops > 0 {
		t.Skipf("the kernel dropped %d datagrams", drops)
	}
	got := g.Dgrams.Datagrams(l.ID)
	for i, p := range got {
		if !bytes.Equal(p, dgramPayload(i, 1000)) {
			t.Fatalf("datagram %d differs", i)
		}
	}
	ch := g.Dgrams.Chunks(l.ID)
	if len(ch) != 3 {
		t.Fatalf("%d chunks %+v, want 3 of 16 datagrams", len(ch), ch)
	}
	for _, c := range ch {
		if c.Datagrams != 16 || c.Flags != srcs.Datagrams|srcs.Partial {
			t.Errorf("chunk %+v, want 16 datagrams, partial", c)
		}
	}
}

// testDatagramBurst sends a burst of datagrams of mixed sizes at once, some
// above the source's limit, so that a runner that receives several per
// call takes them in batches: each arrives whole and in order, or (above
// the limit, where its receive had no room for it) is reported dropped
// with its size. Nothing is lost without a word.
func testDatagramBurst(t *testing.T, newRunner New) {
	g := dgRig(t, newRunner, 16<<10, 8)
	s, c, l := g.UDP(srcs.UDPConfig{MaxDatagram: 1000}, 5*time.Millisecond)
	const total = 120
	rng := rand.New(rand.NewPCG(11, 3))
	sizes := make([]int, total)
	for i := range total {
		sizes[i] = 4 + rng.IntN(900)
		if i%17 == 5 {
			sizes[i] = 1001 + rng.IntN(2000) // above the limit
		}
		if _, err := c.Write(dgramPayload(i, sizes[i])); err != nil {
			t.Fatal(err)
		}
	}
	g.WaitUntil("every datagram delivered or dropped", func() bool {
		return len(g.Dgrams.Datagrams(l.ID))+len(g.Dgrams.Drops(l.ID))+kernelDrops(t, s) >= total
	})
	if drops := kernelDrops(t, s); drops > 0 {
		t.Skipf("the kernel dropped %d datagrams", drops)
	}
	got, dropped := g.Dgrams.Datagrams(l.ID), g.Dgrams.Drops(l.ID)
	next, d := 0, 0
	for _, p := range got {
		i := int(binary.LittleEndian.Uint32(p))
		for ; next < i; next++ {
			// Skipped: it must be a drop, reported in order, of a datagram
			// above the limit.
			if sizes[next] <= 1000 || d >= len(dropped) || dropped[d] <= 1000 {
				t.Fatalf("datagram %d (%d bytes) neither delivered nor reported dropped (drops %v)", next, sizes[next], dropped)
			}
			d++
		}
		if i != next || !bytes.Equal(p, dgramPayload(i, sizes[i])) {
			t.Fatalf("datagram %d delivered as %d bytes of datagram %d: out of order or not whole", next, len(p), i)
		}
		next++
	}
	if len(got)+len(dropped) != total {
		t.Fatalf("%d delivered and %d dropped of %d sent", len(got), len(dropped), total)
	}
}

// DatagramBacklog queues total datagrams on a new UDP lane of g while
// delivery is paused, resumes, and checks that every one arrives, whole
// and in order. It returns the runner's counters from just before the
// resume and after the last datagram, for the runner's own test to say
// how few receives (batches) the backlog took.
func (g *Rig) DatagramBacklog(total int) (before, after contract.RunnerStats) {
	g.t.Helper()
	g.R.SetPaused(true)
	_, c, l := g.UDP(srcs.UDPConfig{MaxDatagram: 512}, 5*time.Millisecond)
	for i := range total {
		if _, err := c.Write(fmt.Appendf(nil, "datagram %d", i)); err != nil {
			g.t.Fatal(err)
		}
	}
	before = g.R.Stats()
	g.R.SetPaused(false)
	g.WaitUntil("every datagram", func() bool { return len(g.Dgrams.Datagrams(l.ID)) >= total })
	for i, p := range g.Dgrams.Datagrams(l.ID) {
		if want := fmt.Sprintf("datagram %d", i); string(p) != want {
			g.t.Fatalf("datagram %d is %q, want %q", i, p, want)
		}
	}
	return before, g.R.Stats()
}
