//go:build linux

package fallback_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

var _ runner = (*fallback.Epoll)(nil)

// TestEpollSuite runs the shared runner contract against the epoll runner,
// with two workers so that lanes spread over both.
func TestEpollSuite(t *testing.T) {
	runSuite(t, suiteCase{newRunner: func(cfg srcs.RunnerConfig) (runner, error) {
		cfg.Workers = 2
		return fallback.NewEpoll(cfg)
	}})
}

// epRig is one epoll runner under test with its own pool, recorder and
// listener. Its cleanup does what the engine does at the end and fails the
// test if any buffer did not come home.
type epRig struct {
	t      *testing.T
	pool   *pool.Pool
	rec    *srcstest.Recorder
	r      *fallback.Epoll
	ln     net.Listener
	lanes  []*srcs.Lane
	nextID srcs.ID
	done   bool
}

func newEpRig(t *testing.T, pc pool.Config, workers int) *epRig {
	t.Helper()
	if pc.BufSize == 0 {
		pc.BufSize = 4096
	}
	p, err := pool.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := fallback.NewEpoll(srcs.RunnerConfig{Workers: workers, Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &epRig{t: t, pool: p, rec: srcstest.NewRecorder(), r: r, ln: ln}
	t.Cleanup(g.shutdown)
	return g
}

// dial connects a client and returns it with the accepted server side.
// Dial returns once the handshake is done, so the one connection in the
// accept queue is this client's.
func (g *epRig) dial() (*net.TCPConn, *net.TCPConn) {
	g.t.Helper()
	client, err := net.Dial("tcp", g.ln.Addr().String())
	if err != nil {
		g.t.Fatal(err)
	}
	server, err := g.ln.Accept()
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { client.Close() })
	return client.(*net.TCPConn), server.(*net.TCPConn)
}

// conn connects a client to a new lane and adds the lane.
func (g *epRig) conn(flush time.Duration) (*net.TCPConn, *srcs.Lane) {
	g.t.Helper()
	client, server := g.dial()
	return client, g.add(srcs.NewConn(server), flush)
}

func (g *epRig) add(src srcs.Source, flush time.Duration) *srcs.Lane {
	g.t.Helper()
	l := g.lane(src, flush)
	if err := g.r.Add(l); err != nil {
		g.t.Fatalf("add: %v", err)
	}
	return l
}

func (g *epRig) lane(src srcs.Source, flush time.Duration) *srcs.Lane {
	g.nextID++
	l := &srcs.Lane{ID: g.nextID, Src: src, Account: g.pool.Join(g.nextID), Flush: flush, Out: g.rec}
	g.lanes = append(g.lanes, l)
	return l
}

// shutdown closes the runner, the sources and the pool; pool.Close fails
// while any buffer is out.
func (g *epRig) shutdown() {
	if g.done {
		return
	}
	g.done = true
	t := g.t
	if err := g.r.Close(); err != nil {
		t.Errorf("runner close: %v", err)
	}
	if st := g.r.Stats(); st.Lanes != 0 || st.Threads != 0 {
		t.Errorf("after Close: %d lanes, %d threads", st.Lanes, st.Threads)
	}
	for _, l := range g.lanes {
		l.Src.Close()
		l.Account.Leave()
	}
	g.ln.Close()
	g.rec.ReleaseAll()
	if err := g.rec.Err(); err != nil {
		t.Error(err)
	}
	if err := g.pool.Close(); err != nil {
		t.Errorf("pool close: %v", err)
	}
}

// waitUntil re-checks cond on every emit, and every few milliseconds for
// state that emits do not signal, or fails the test after timeout.
func (g *epRig) waitUntil(timeout time.Duration, what string, cond func() bool) {
	g.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-g.rec.Emitted():
		case <-tick.C:
		case <-deadline.C:
			g.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

func (g *epRig) finished(l *srcs.Lane, timeout time.Duration) *srcstest.LaneRecord {
	g.t.Helper()
	got, err := g.rec.WaitFinished(1, timeout)
	if err != nil {
		g.t.Fatal(err)
	}
	lr := got[l.ID]
	if lr == nil {
		g.t.Fatalf("lane %d: another lane finished: %v", l.ID, got)
	}
	return lr
}

// epRandom returns size reproducible random bytes.
func epRandom(seed uint64, size int) []byte {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	data := make([]byte, size)
	rand.NewChaCha8(s).Read(data)
	return data
}

// epSend writes data in random pieces with random pauses, then closes c.
func epSend(c net.Conn, seed uint64, data []byte, maxPiece int, maxPause time.Duration) error {
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 0xe9))
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+rng.IntN(maxPiece))
		if _, err := c.Write(data[off : off+n]); err != nil {
			return err
		}
		off += n
		if maxPause > 0 && rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(maxPause))))
		}
	}
	return nil
}

// TestEpollStreams sends a random stream, in random pieces with random
// pauses, on each of many concurrent connections, and checks that every
// lane delivers exactly those bytes and ends with io.EOF; with a pool far
// smaller than the number of lanes, it must not deadlock either.
func TestEpollStreams(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conns    int
		buffers  int
		maxSize  int
		maxPause time.Duration
		flush    time.Duration
	}{
		{"1000conns", 1000, 256, 24 << 10, 2 * time.Millisecond, 5 * time.Millisecond},
		{"16buffers", 1000, 16, 8 << 10, time.Millisecond, 2 * time.Millisecond},
		{"noflush", 100, 32, 32 << 10, time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newEpRig(t, pool.Config{Buffers: tc.buffers}, 2)
			type sent struct {
				size int
				crc  uint32
			}
			want := make(map[srcs.ID]sent, tc.conns)
			var wg sync.WaitGroup
			errc := make(chan error, tc.conns)
			for i := range tc.conns {
				client, l := g.conn(tc.flush)
				size := rand.IntN(tc.maxSize + 1)
				if i == 0 {
					size = 0 // ends before its first byte
				}
				data := epRandom(uint64(l.ID), size)
				want[l.ID] = sent{size, crc32.Checksum(data, srcstest.Castagnoli)}
				wg.Go(func() {
					if err := epSend(client, uint64(l.ID), data, 4096, tc.maxPause); err != nil {
						errc <- err
					}
				})
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatalf("client: %v", err)
			}
			got, err := g.rec.WaitFinished(tc.conns, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for id, w := range want {
				lr := got[id]
				if !errors.Is(lr.Err, io.EOF) {
					t.Errorf("lane %d: finished with %v, want io.EOF", id, lr.Err)
				}
				if lr.Bytes != int64(w.size) || lr.CRC != w.crc {
					t.Errorf("lane %d: got %d bytes crc %08x, sent %d bytes crc %08x", id, lr.Bytes, lr.CRC, w.size, w.crc)
				}
			}
			st := g.r.Stats()
			if st.Lanes != 0 || st.Workers != 2 || st.Threads != 2 || st.Reads == 0 || st.Waits == 0 {
				t.Errorf("stats after every lane ended: %+v", st)
			}
			if n := g.pool.Stats().InUse; n != 0 {
				t.Errorf("after every lane ended: %d buffers in use", n)
			}
			g.shutdown()
		})
	}
}

// TestEpollLaneEnds covers how a single lane's data leaves: by the flush
// timeout, at end of stream, and before a connection reset.
func TestEpollLaneEnds(t *testing.T) {
	t.Run("FlushTimeout", func(t *testing.T) {
		const flush = 100 * time.Millisecond
		g := newEpRig(t, pool.Config{Buffers: 4}, 1)
		client, l := g.conn(flush)
		start := time.Now()
		if _, err := client.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		// Nothing else arrives: only the worker's own timeout can emit.
		g.waitUntil(5*time.Second, "the partial flush", func() bool { return g.rec.Lane(l.ID).Chunks == 1 })
		if d := time.Since(start); d < flush {
			t.Errorf("emitted %v after the write, before the %v flush timeout", d, flush)
		}
		lr := g.rec.Lane(l.ID)
		if lr.Bytes != 5 || lr.Partials != 1 {
			t.Errorf("got %d bytes in %d partials, want 5 in 1", lr.Bytes, lr.Partials)
		}
		if lr.MaxHoldTime < flush || lr.MaxHoldTime > flush+2*time.Second {
			t.Errorf("held for %v, want about %v", lr.MaxHoldTime, flush)
		}
		if n := g.pool.Stats().InUse; n != 0 {
			t.Errorf("after the flush the idle lane holds %d buffers", n)
		}
		client.Close()
		end := g.finished(l, 5*time.Second)
		if !errors.Is(end.Err, io.EOF) || end.Bytes != 5 || end.Chunks != 1 {
			t.Errorf("finished with %v after %d bytes in %d chunks, want io.EOF after 5 in 1", end.Err, end.Bytes, end.Chunks)
		}
	})

	t.Run("EOF", func(t *testing.T) {
		g := newEpRig(t, pool.Config{Buffers: 4}, 1)
		client, l := g.conn(time.Hour)
		data := epRandom(7, 2*4096+1808)
		if _, err := client.Write(data); err != nil {
			t.Fatal(err)
		}
		client.Close()
		lr := g.finished(l, 5*time.Second)
		if !errors.Is(lr.Err, io.EOF) {
			t.Errorf("finished with %v, want io.EOF", lr.Err)
		}
		// Two full buffers, then the tail as a partial at end of stream.
		if lr.Bytes != int64(len(data)) || lr.CRC != crc32.Checksum(data, srcstest.Castagnoli) ||
			lr.Chunks != 3 || lr.Partials != 1 {
			t.Errorf("got %d bytes in %d chunks (%d partial), want %d in 3 (1 partial)", lr.Bytes, lr.Chunks, lr.Partials, len(data))
		}
	})

	for _, flush := range []time.Duration{0, time.Hour} {
		t.Run("Reset/flush="+flush.String(), func(t *testing.T) {
			g := newEpRig(t, pool.Config{Buffers: 4}, 1)
			client, l := g.conn(flush)
			data := epRandom(9, 5000)
			if _, err := client.Write(data); err != nil {
				t.Fatal(err)
			}
			// Once the peer acknowledged every byte they sit in the lane's
			// socket (or buffer), and must come out before the reset.
			g.waitUntil(5*time.Second, "the bytes to be acknowledged", func() bool { return epUnacked(t, client) == 0 })
			if err := client.SetLinger(0); err != nil {
				t.Fatal(err)
			}
			client.Close() // RST
			lr := g.finished(l, 5*time.Second)
			if !errors.Is(lr.Err, srcs.ErrReset) {
				t.Errorf("finished with %v, want srcs.ErrReset", lr.Err)
			}
			if lr.Bytes != int64(len(data)) || lr.CRC != crc32.Checksum(data, srcstest.Castagnoli) {
				t.Errorf("got %d bytes, want the %d sent before the reset", lr.Bytes, len(data))
			}
		})
	}
}

// epUnacked returns how many bytes c has sent that its peer has not yet
// acknowledged.
func epUnacked(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return info.Unacked + uint32(info.Notsent_bytes)
}

// TestEpollSlowConsumer holds every emitted buffer: the lanes must run the
// pool dry, then stop reading (no polling, no spinning) so that the kernel
// throttles the senders, and deliver everything once the consumer catches
// up.
func TestEpollSlowConsumer(t *testing.T) {
	const buffers, lanes, size = 8, 4, 4 << 20
	g := newEpRig(t, pool.Config{Buffers: buffers, MaxPerSource: 2}, 2)
	g.rec.Hold = true
	want := map[srcs.ID]uint32{}
	var written atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range lanes {
		client, server := g.dial()
		// Fixed socket buffers (no autotuning), so that the senders block
		// long before the end of their data. Much smaller ones would
		// shrink the window enough to slow TCP itself to a crawl.
		server.SetReadBuffer(256 << 10)
		client.SetWriteBuffer(16 << 10)
		l := g.add(srcs.NewConn(server), time.Millisecond)
		data := epRandom(uint64(100+i), size)
		want[l.ID] = crc32.Checksum(data, srcstest.Castagnoli)
		wg.Go(func() {
			defer client.Close()
			for off := 0; off < size; off += 8 << 10 {
				if _, err := client.Write(data[off : off+8<<10]); err != nil {
					return
				}
				written.Add(8 << 10)
			}
		})
	}

	g.waitUntil(10*time.Second, "the pool to run dry", func() bool {
		if n := g.rec.Held(); n > buffers {
			t.Fatalf("%d buffers downstream, the pool has %d", n, buffers)
		}
		return g.rec.Held() == buffers
	})
	for _, l := range g.lanes {
		if st := l.Account.Stats(); st.Held > 2 {
			t.Errorf("lane %d holds %d buffers, more than its cap of 2", l.ID, st.Held)
		}
	}
	// Let the senders fill the socket buffers, then watch nothing move.
	g.waitUntil(10*time.Second, "the senders to block", func() bool {
		before := written.Load()
		time.Sleep(50 * time.Millisecond)
		return written.Load() == before
	})
	w0, st0 := written.Load(), g.r.Stats()
	time.Sleep(300 * time.Millisecond)
	w1, st1 := written.Load(), g.r.Stats()
	if w1 != w0 || w1 >= lanes*size {
		t.Errorf("senders not throttled: %d then %d of %d bytes written", w0, w1, lanes*size)
	}
	// No reads without buffers, and no polling: the workers wake only for
	// the few edges of data still moving between the socket buffers.
	if st1.Reads != st0.Reads || st1.Waits > st0.Waits+50 {
		t.Errorf("workers busy while every lane waits for a buffer: reads %d→%d, waits %d→%d",
			st0.Reads, st1.Reads, st0.Waits, st1.Waits)
	}
	t.Logf("throttled at %d of %d bytes; waits %d→%d, wakeups %d→%d", w1, lanes*size, st0.Waits, st1.Waits, st0.Wakeups, st1.Wakeups)
	if n := g.rec.Held(); n != buffers {
		t.Errorf("%d buffers downstream, want all %d", n, buffers)
	}

	got := map[srcs.ID]*srcstest.LaneRecord{}
	deadline := time.After(30 * time.Second)
	for len(got) < lanes {
		if n := g.rec.Held(); n > buffers {
			t.Fatalf("%d buffers downstream, the pool has %d", n, buffers)
		}
		g.rec.ReleaseAll()
		select {
		case lr := <-g.rec.Finished():
			got[lr.ID] = lr
		case <-g.rec.Emitted():
		case <-deadline:
			t.Fatalf("%d of %d lanes finished", len(got), lanes)
		}
	}
	for id, crc := range want {
		if lr := got[id]; lr.Bytes != size || lr.CRC != crc || !errors.Is(lr.Err, io.EOF) {
			t.Errorf("lane %d: %d bytes crc %08x err %v, want %d bytes crc %08x and EOF", id, lr.Bytes, lr.CRC, lr.Err, size, crc)
		}
	}
}

// TestEpollPauseRemove pauses a lane whose data keeps arriving, resumes it
// without a new edge, and removes lanes while paused: one with data in its
// socket, one holding partial data, which must come out as a Partial.
func TestEpollPauseRemove(t *testing.T) {
	g := newEpRig(t, pool.Config{Buffers: 8}, 1)
	client, l := g.conn(0)
	heldClient, held := g.conn(time.Hour)
	bytesNow := func() int64 { return g.rec.Lane(l.ID).Bytes }
	piece := []byte("0123456789")
	if _, err := client.Write(piece); err != nil {
		t.Fatal(err)
	}
	if _, err := heldClient.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	g.waitUntil(5*time.Second, "the first piece", func() bool { return bytesNow() == 10 })
	g.waitUntil(5*time.Second, "the partial read", func() bool { return held.Account.Stats().Held == 1 })

	g.r.SetPaused(true)
	if _, err := client.Write(piece); err != nil {
		t.Fatal(err)
	}
	// The edge for these bytes arrives while paused and must not be lost.
	time.Sleep(150 * time.Millisecond)
	if n := bytesNow(); n != 10 {
		t.Fatalf("paused runner read on: %d bytes", n)
	}
	g.r.SetPaused(false)
	g.waitUntil(5*time.Second, "the resume", func() bool { return bytesNow() == 20 })

	g.r.SetPaused(true)
	if _, err := client.Write(piece); err != nil {
		t.Fatal(err)
	}
	g.r.Remove(l)
	g.r.Remove(held)
	g.r.Remove(held) // twice: a no-op
	got, err := g.rec.WaitFinished(2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[l.ID]; !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 20 {
		t.Errorf("removed while paused: %v after %d bytes, want srcs.ErrStopped after 20", lr.Err, lr.Bytes)
	}
	if lr := got[held.ID]; !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 7 || lr.Partials != 1 {
		t.Errorf("removed with partial data: %v after %d bytes in %d partials, want srcs.ErrStopped after 7 in 1",
			lr.Err, lr.Bytes, lr.Partials)
	}
	g.r.Remove(l) // after Finish: a no-op
	g.r.SetPaused(false)
	if st := g.r.Stats(); st.Lanes != 0 {
		t.Errorf("after Finish: %d lanes", st.Lanes)
	}
	if n := g.pool.Stats().InUse; n != 0 {
		t.Errorf("removed lanes hold %d buffers", n)
	}
	// The runner never closes a source: the connection still works.
	if _, err := client.Write(piece); err != nil {
		t.Errorf("write after Remove: %v", err)
	}
}

// TestEpollCloseInFlight closes the runner while every lane is streaming,
// and while lanes wait for buffers a slow consumer holds: Close must
// finish them all and leave no pool wait behind.
func TestEpollCloseInFlight(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			const lanes, buffers = 50, 16
			g := newEpRig(t, pool.Config{Buffers: buffers}, 2)
			g.rec.Hold = hold
			var wg sync.WaitGroup
			for i := range lanes {
				client, _ := g.conn(time.Duration(i%3) * time.Millisecond)
				wg.Go(func() {
					buf := make([]byte, 1+rand.IntN(16<<10))
					for {
						if _, err := client.Write(buf); err != nil {
							return
						}
					}
				})
			}
			if hold {
				g.waitUntil(10*time.Second, "lanes waiting for buffers", func() bool {
					return g.rec.Held() == buffers && g.pool.Stats().Waiters > 0
				})
			} else {
				g.waitUntil(10*time.Second, "traffic on every lane", func() bool {
					for _, l := range g.lanes {
						if g.rec.Lane(l.ID).Bytes == 0 {
							return false
						}
					}
					return true
				})
			}
			if err := g.r.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := g.rec.WaitFinished(lanes, time.Second)
			if err != nil {
				t.Fatalf("after Close returned: %v", err)
			}
			for id, lr := range got {
				if !errors.Is(lr.Err, srcs.ErrStopped) {
					t.Errorf("lane %d: %v, want srcs.ErrStopped", id, lr.Err)
				}
			}
			if st := g.pool.Stats(); st.Waiters != 0 {
				t.Errorf("after Close: %d pool waits left behind", st.Waiters)
			}
			_, server := g.dial()
			l := g.lane(srcs.NewConn(server), 0)
			if err := g.r.Add(l); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Add after Close: %v, want net.ErrClosed", err)
			}
			if err := g.r.Close(); err != nil { // idempotent
				t.Error(err)
			}
			g.shutdown() // closes the sources, which stops the writers
			wg.Wait()
		})
	}
}

// TestEpollIdleLanesHoldNoBuffers connects many silent sources: none of
// them may take a buffer, not even to try a read.
func TestEpollIdleLanesHoldNoBuffers(t *testing.T) {
	const idle, active = 500, 10
	g := newEpRig(t, pool.Config{Buffers: 64}, 2)
	for range idle {
		g.conn(time.Millisecond)
	}
	// Lanes added last reach both workers after every idle lane: once
	// they are done, every idle lane has been registered and looked at.
	var clients []*net.TCPConn
	var busy []*srcs.Lane
	for range active {
		c, l := g.conn(0)
		clients, busy = append(clients, c), append(busy, l)
	}
	for _, c := range clients {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range busy {
		g.waitUntil(5*time.Second, "the active lanes' bytes", func() bool { return g.rec.Lane(l.ID).Bytes == 1 })
		g.r.Remove(l)
	}
	if _, err := g.rec.WaitFinished(active, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	st := g.pool.Stats()
	if st.InUse != 0 || st.Waiters != 0 {
		t.Errorf("%d idle lanes: %d buffers in use, %d waiters; want none", idle, st.InUse, st.Waiters)
	}
	// The active lanes need one buffer per read, and perhaps one more to
	// find the socket empty; the idle ones need none.
	if st.Acquired > 3*active {
		t.Errorf("%d buffers acquired for %d active and %d idle lanes", st.Acquired, active, idle)
	}
	if rs := g.r.Stats(); rs.Lanes != idle {
		t.Errorf("runner drives %d lanes, want %d", rs.Lanes, idle)
	}
	if err := g.r.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := g.rec.WaitFinished(idle, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 0 {
			t.Errorf("idle lane %d: %v after %d bytes", id, lr.Err, lr.Bytes)
		}
	}
}

// epFile is a test source over a regular file, read as Kind File from an
// offset.
type epFile struct {
	f   *os.File
	off int64
}

func (s *epFile) Name() string               { return s.f.Name() }
func (s *epFile) Open(context.Context) error { return nil }
func (s *epFile) Read(p []byte) (int, error) { return 0, errors.New("epFile: read through Desc") }
func (s *epFile) Close() error               { return s.f.Close() }
func (s *epFile) Desc() (srcs.Desc, error) {
	return srcs.Desc{FD: int(s.f.Fd()), Kind: srcs.File, Offset: s.off}, nil
}

func epTempFile(t testing.TB, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestEpollFile(t *testing.T) {
	for _, tc := range []struct {
		name         string
		size, offset int
		flush        time.Duration
	}{
		{"whole", 1<<20 + 123, 0, time.Hour},
		{"offset", 300<<10 + 1, 4097, 0},
		{"empty", 0, 0, time.Millisecond},
		{"pastEnd", 100, 200, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := epRandom(uint64(tc.size), tc.size)
			g := newEpRig(t, pool.Config{Buffers: 8}, 1)
			g.rec.Keep = true
			l := g.add(&epFile{f: epTempFile(t, data), off: int64(tc.offset)}, tc.flush)
			lr := g.finished(l, 20*time.Second)
			if !errors.Is(lr.Err, io.EOF) {
				t.Errorf("finished with %v, want io.EOF", lr.Err)
			}
			if want := data[min(tc.offset, len(data)):]; !bytes.Equal(lr.Data, want) {
				t.Errorf("got %d bytes, want %d bytes from offset %d, byte-exact", len(lr.Data), len(want), tc.offset)
			}
		})
	}
}

// epOrder forwards to a Recorder and logs, in order, the file lane's first
// emit, the socket lane's first emit and the file lane's Finish.
type epOrder struct {
	*srcstest.Recorder
	file, sock srcs.ID
	firstFile  chan struct{}

	mu  sync.Mutex
	log []string
}

func (o *epOrder) Emit(l *srcs.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	o.Recorder.Emit(l, b, n, flags, first)
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case l.ID == o.file && len(o.log) == 0:
		o.log = append(o.log, "file emit")
		close(o.firstFile)
	case l.ID == o.sock:
		o.log = append(o.log, "sock emit")
	}
}

func (o *epOrder) Finish(l *srcs.Lane, err error) {
	o.mu.Lock()
	if l.ID == o.file {
		o.log = append(o.log, "file finish")
	}
	o.mu.Unlock()
	o.Recorder.Finish(l, err)
}

// TestEpollFileFairness reads a large file, which is always readable, on
// the same worker as a socket: the socket's data must not wait for the end
// of the file.
func TestEpollFileFairness(t *testing.T) {
	const size = 16 << 20
	g := newEpRig(t, pool.Config{Buffers: 16}, 1)
	client, server := g.dial()
	sock := g.lane(srcs.NewConn(server), 0)
	file := g.lane(&epFile{f: epTempFile(t, epRandom(1, size))}, time.Hour)
	o := &epOrder{Recorder: g.rec, file: file.ID, sock: sock.ID, firstFile: make(chan struct{})}
	sock.Out, file.Out = o, o
	for _, l := range []*srcs.Lane{sock, file} {
		if err := g.r.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-o.firstFile:
	case <-time.After(5 * time.Second):
		t.Fatal("no data from the file")
	}
	if _, err := client.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	lr := g.finished(file, 20*time.Second)
	if lr.Bytes != size || !errors.Is(lr.Err, io.EOF) {
		t.Errorf("file: %d bytes, %v", lr.Bytes, lr.Err)
	}
	g.waitUntil(5*time.Second, "the socket's byte", func() bool { return g.rec.Lane(sock.ID).Bytes == 1 })
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.log) != 3 || o.log[1] != "sock emit" {
		t.Errorf("events %q: the socket waited for the file", o.log)
	}
}

// epNoDesc is a source without a kernel descriptor.
type epNoDesc struct{}

func (epNoDesc) Name() string               { return "nodesc" }
func (epNoDesc) Open(context.Context) error { return nil }
func (epNoDesc) Read([]byte) (int, error)   { return 0, io.EOF }
func (epNoDesc) Close() error               { return nil }

// epFD is a source over a raw descriptor of some kind; Close closes it.
type epFD struct {
	fd   int
	kind srcs.Kind
}

func (s *epFD) Name() string               { return "fd" }
func (s *epFD) Open(context.Context) error { return nil }
func (s *epFD) Read([]byte) (int, error)   { return 0, errors.New("epFD: read through Desc") }
func (s *epFD) Close() error               { return unix.Close(s.fd) }
func (s *epFD) Desc() (srcs.Desc, error)   { return srcs.Desc{FD: s.fd, Kind: s.kind}, nil }

// epSocketpair returns a connected pair of stream (or datagram) sockets,
// closed at the end of the test unless handed to a source.
func epSocketpair(t testing.TB, typ int) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fds[0], fds[1]
}

func TestEpollAddErrors(t *testing.T) {
	g := newEpRig(t, pool.Config{Buffers: 4}, 1)
	if g.r.Name() != "epoll" {
		t.Errorf("Name() = %q", g.r.Name())
	}
	if err := g.r.Add(g.lane(epNoDesc{}, 0)); !errors.Is(err, srcs.ErrNoDescriptor) {
		t.Errorf("source without descriptor: %v, want srcs.ErrNoDescriptor", err)
	}
	a, b := epSocketpair(t, unix.SOCK_STREAM)
	defer unix.Close(b)
	if err := g.r.Add(g.lane(&epFD{fd: a, kind: srcs.Datagram}, 0)); !errors.Is(err, unix.EPROTOTYPE) {
		t.Errorf("datagram kind on a stream socket: %v, want EPROTOTYPE", err)
	}
	if err := g.r.Add(g.lane(&epFD{fd: 1 << 20, kind: srcs.Stream}, 0)); !errors.Is(err, syscall.EBADF) {
		t.Errorf("bad descriptor: %v, want EBADF", err)
	}
	g.lanes = g.lanes[:len(g.lanes)-1] // not ours to close
	for _, l := range []*srcs.Lane{nil, {}, {Src: epNoDesc{}}} {
		if err := g.r.Add(l); err == nil {
			t.Errorf("Add(%+v) succeeded", l)
		}
	}
	c, d := epSocketpair(t, unix.SOCK_STREAM)
	defer unix.Close(d)
	l := g.add(&epFD{fd: c, kind: srcs.Stream}, 0)
	if err := g.r.Add(l); err == nil {
		t.Error("second Add of a lane succeeded")
	}
	if st := g.r.Stats(); st.Lanes != 1 {
		t.Errorf("after failed Adds: %d lanes, want 1", st.Lanes)
	}
	if _, err := fallback.NewEpoll(srcs.RunnerConfig{Workers: -1, Pool: g.pool}); err == nil {
		t.Error("NewEpoll with negative Workers succeeded")
	}
}

// TestEpollUnixStream reads a socketpair, whose descriptor is handed over
// in blocking mode: the runner must make it non-blocking.
func TestEpollUnixStream(t *testing.T) {
	g := newEpRig(t, pool.Config{Buffers: 8}, 1)
	a, b := epSocketpair(t, unix.SOCK_STREAM)
	l := g.add(&epFD{fd: a, kind: srcs.Stream}, time.Millisecond)
	data := epRandom(3, 1<<20)
	go func() {
		defer unix.Close(b)
		for off := 0; off < len(data); {
			n, err := unix.Write(b, data[off:])
			if err != nil {
				return
			}
			off += n
		}
	}()
	lr := g.finished(l, 10*time.Second)
	if !errors.Is(lr.Err, io.EOF) || lr.Bytes != int64(len(data)) || lr.CRC != crc32.Checksum(data, srcstest.Castagnoli) {
		t.Errorf("got %d bytes (%v), want %d and io.EOF", lr.Bytes, lr.Err, len(data))
	}
}
