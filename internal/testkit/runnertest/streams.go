package runnertest

import (
	"bytes"
	"context"
	"errors"
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

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// suite is one run of TestStreams: the runner under test and how it
// differs from the others.
type suite struct {
	newRunner New
	Options
}

// rig builds a Rig for one case: a pool as pc says (4 KiB buffers unless
// it says otherwise) and a runner with the given number of workers, where
// it has workers.
func (s suite) rig(t *testing.T, pc pool.Config, workers int) *Rig {
	t.Helper()
	return NewRig(t, s.newRunner, RigConfig{Pool: pc, Runner: contract.RunnerConfig{Workers: workers}, Source: s.Source})
}

// TestStreams runs the stream cases against the runners newRunner makes,
// in the manner of testing/fstest.TestFS: every runner passes the same
// cases, each on a pool of its own that must get every buffer back.
// Streams, lane ends, files and descriptors come first, then pause and
// resume (pause.go), then shutdown (shutdown.go). o says where the runner
// may differ from the others.
func TestStreams(t *testing.T, newRunner New, o Options) {
	s := suite{newRunner, o}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Streams", s.streams},
		{"Flush", s.flush},
		{"EOF", s.eof},
		{"Reset", s.reset},
		{"SlowConsumer", s.slowConsumer},
		{"Survivors", s.survivors},
		{"IdleLanes", s.idleLanes},
		{"File", s.file},
		{"FileFairness", s.fileFairness},
		{"Descriptors", s.descriptors},
		{"AddErrors", s.addErrors},
		{"Pause", s.pause},
		{"PausedGrant", s.pausedGrant},
		{"FlushWhilePaused", s.flushWhilePaused},
		{"RemovePartial", s.removePartial},
		{"CloseWhilePaused", s.closeWhilePaused},
		{"CloseInFlight", s.closeInFlight},
	} {
		t.Run(tc.name, tc.fn)
	}
}

// streams sends a random stream, in random pieces with random pauses, on
// each of many concurrent connections, and checks that every lane delivers
// exactly those bytes and ends with io.EOF; with a pool far smaller than
// the number of lanes, it must not deadlock either, and the FIFO grants
// must keep every lane moving. The runner's counters must add up
// (checkCounters).
func (s suite) streams(t *testing.T) {
	for _, tc := range []struct {
		name              string
		conns             int
		pool              pool.Config
		maxSize, maxPiece int
		maxPause, flush   time.Duration
	}{
		{"ManyConns", 1000, pool.Config{BufSize: 16 << 10, Buffers: 256}, 48 << 10, 16 << 10, 2 * time.Millisecond, 2 * time.Millisecond},
		// 16 buffers for 1000 lanes: most wait for a buffer at some point.
		{"SmallPool", 1000, pool.Config{Buffers: 16}, 24 << 10, 4 << 10, time.Millisecond, time.Millisecond},
		{"Bursts", 100, pool.Config{Buffers: 8}, 32 << 10, 6000, 0, 2 * time.Millisecond},
		{"NoFlush", 100, pool.Config{Buffers: 32}, 32 << 10, 4 << 10, time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := s.rig(t, tc.pool, 2)
			// In SmallPool the test holds every buffer, from before the
			// first lane is added until a lane queues for one, so the case
			// tests contention however the machine schedules the clients.
			var release func()
			if tc.name == "SmallPool" {
				release = holdPool(t, g.Pool)
			}
			want := make(map[srcs.ID][]byte, tc.conns)
			clients := make(map[srcs.ID]net.Conn, tc.conns)
			for i := range tc.conns {
				client, l := g.Conn(tc.flush)
				size := rand.IntN(tc.maxSize + 1)
				if i == 0 {
					size = 0 // ends before its first byte
				}
				want[l.ID], clients[l.ID] = RandomBytes(uint64(l.ID), size), client
			}
			// Every client at once, so that lanes contend for the buffers.
			var wg sync.WaitGroup
			errc := make(chan error, tc.conns)
			for id, client := range clients {
				wg.Go(func() {
					if err := send(client, uint64(id), want[id], tc.maxPiece, tc.maxPause); err != nil {
						errc <- err
					}
				})
			}
			if release != nil {
				g.WaitUntil("a lane queues for a buffer", func() bool { return g.Pool.Stats().Waiters > 0 })
				release()
			}
			sentAll := make(chan struct{})
			go func() { wg.Wait(); close(sentAll) }()
			select {
			case <-sentAll:
			case <-time.After(finishTimeout):
				// The cleanups close the clients, which ends the writers.
				t.Fatal("clients could not send: the runner stopped reading")
			}
			close(errc)
			for err := range errc {
				t.Fatalf("client: %v", err)
			}
			got := g.Finished(tc.conns)
			for id, data := range want {
				lr := got[id]
				if !errors.Is(lr.Err, io.EOF) {
					t.Errorf("lane %d: finished with %v, want io.EOF", id, lr.Err)
				}
				if lr.Bytes != int64(len(data)) || lr.CRC != CRC(data) {
					t.Errorf("lane %d: got %d bytes crc %08x, sent %d bytes crc %08x", id, lr.Bytes, lr.CRC, len(data), CRC(data))
				}
			}
			st := g.R.Stats()
			switch {
			case st.Runner != g.R.Name() || st.Lanes != 0 || st.Reads == 0:
				t.Errorf("stats after every lane ended: %+v", st)
			case s.LaneWorkers && (st.Workers != 0 || st.Threads != 0):
				t.Errorf("stats after every lane ended: %+v, want no lane workers left", st)
			case !s.LaneWorkers && (st.Workers != 2 || st.Threads != 2 || st.Waits == 0):
				t.Errorf("stats after every lane ended: %+v, want 2 workers, each on a locked thread, that waited", st)
			}
			checkCounters(t, st)
			if n := g.Pool.Stats().InUse; n != 0 {
				t.Errorf("after every lane ended: %d buffers in use", n)
			}
		})
	}
}

// holdPool takes every buffer of p, one account each (a source may hold
// only a share of the pool), and returns the function that gives them
// back. The test's cleanup gives back what is still held.
func holdPool(t *testing.T, p *pool.Pool) (release func()) {
	t.Helper()
	const firstID = 1 << 40 // far above the rig's lane IDs
	var held []*pool.Buf
	var accounts []*pool.Account
	release = func() {
		for _, b := range held {
			p.Release(b)
		}
		for _, a := range accounts {
			a.Leave()
		}
		held, accounts = nil, nil
	}
	t.Cleanup(release)
	for i := range p.Len() {
		a := p.Join(pool.SourceID(firstID + i))
		accounts = append(accounts, a)
		b, ok := a.TryAcquire()
		if !ok {
			t.Fatalf("holding the pool: buffer %d of %d was not free", i+1, p.Len())
		}
		held = append(held, b)
	}
	return release
}

// checkCounters checks that a runner that carried traffic counted its
// system calls, and its kernel entries and completions where it has them
// (contract.RunnerStats says what each runner counts), so that reports can
// say why one runner is cheaper than another.
func checkCounters(t *testing.T, st contract.RunnerStats) {
	t.Helper()
	ok := st.Reads > 0 && st.Syscalls > 0
	switch st.Runner {
	case "uring":
		// Every read is a CQE; io_uring_enter is most of the syscalls.
		ok = ok && st.Enters > 0 && st.Completions >= st.Reads && st.Syscalls >= st.Enters
	case "epoll":
		ok = ok && st.Enters == st.Waits && st.Completions > 0 && st.Syscalls >= st.Reads+st.Enters
	case "thread":
		ok = ok && st.Enters == st.Waits && st.Syscalls >= st.Reads+st.Enters
	case "goroutine":
		// Go's netpoller waits: the runner enters the kernel only to read.
		ok = ok && st.Enters == 0 && st.Syscalls == st.Reads+st.Waits
	}
	if !ok {
		t.Errorf("runner counters do not add up: %+v", st)
	}
}

// flush writes to a lane twice, each time waiting for the lane to emit on
// its own: after the flush timeout, or at once without one. Each chunk is
// partial, and held about the timeout; an idle lane gives its buffer back.
// Then more data and the end of stream follow, and the lane delivers it
// all.
func (s suite) flush(t *testing.T) {
	for _, flush := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(flush.String(), func(t *testing.T) {
			g := s.rig(t, pool.Config{Buffers: 4}, 1)
			client, l := g.Conn(flush)
			var sent []byte
			for i, msg := range []string{"hello", "world"} {
				start := time.Now()
				if _, err := client.Write([]byte(msg)); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, msg...)
				// Nothing else arrives: only the lane's own deadline can emit.
				g.WaitUntil("a partial flush", func() bool { return g.Rec.Lane(l.ID).Chunks == i+1 })
				waited := time.Since(start)
				lr := g.Rec.Lane(l.ID)
				if lr.Bytes != int64(len(sent)) || lr.Partials != i+1 {
					t.Errorf("after write %d: %d bytes in %d chunks (%d partial), want %d, every chunk partial", i, lr.Bytes, lr.Chunks, lr.Partials, len(sent))
				}
				if waited < flush || lr.MaxHoldTime < flush {
					t.Errorf("chunk %d held %v, emitted %v after the write: before the %v flush timeout", i, lr.MaxHoldTime, waited, flush)
				}
				if lr.MaxHoldTime > flush+2*time.Second {
					t.Errorf("chunk %d held %v for a %v flush timeout", i, lr.MaxHoldTime, flush)
				}
				if !s.IdleHoldsBuffer {
					g.WaitUntil("the idle lane to give its buffer back", func() bool { return g.Pool.Stats().InUse == 0 })
				}
			}
			tail := RandomBytes(1, 5000)
			sent = append(sent, tail...)
			if _, err := client.Write(tail); err != nil {
				t.Fatal(err)
			}
			client.Close()
			lr := g.Finish(l)
			if !errors.Is(lr.Err, io.EOF) || lr.Bytes != int64(len(sent)) || lr.CRC != CRC(sent) {
				t.Errorf("finished with %v after %d bytes crc %08x, want io.EOF after %d crc %08x", lr.Err, lr.Bytes, lr.CRC, len(sent), CRC(sent))
			}
		})
	}
}

// eof ends a stream of two buffers and a bit on a lane whose flush timeout
// never passes: two full chunks, then the tail as a partial one at the end
// of stream.
func (s suite) eof(t *testing.T) {
	g := s.rig(t, pool.Config{Buffers: 4}, 1)
	client, l := g.Conn(time.Hour)
	data := RandomBytes(7, 2*g.Pool.BufSize()+1808)
	if _, err := client.Write(data); err != nil {
		t.Fatal(err)
	}
	client.Close()
	lr := g.Finish(l)
	if !errors.Is(lr.Err, io.EOF) {
		t.Errorf("finished with %v, want io.EOF", lr.Err)
	}
	if lr.Bytes != int64(len(data)) || lr.CRC != CRC(data) || lr.Chunks != 3 || lr.Partials != 1 {
		t.Errorf("got %d bytes in %d chunks (%d partial), want %d in 3 (1 partial)", lr.Bytes, lr.Chunks, lr.Partials, len(data))
	}
}

// reset resets a connection whose bytes the lane has emitted or still
// holds: they all come out before Finish reports the reset. In MidBuffer
// the lane has read every byte into a buffer it still holds when the
// reset arrives.
func (s suite) reset(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flush     time.Duration
		size      int
		midBuffer bool
	}{
		{"flush=0s", 0, 5000, false},
		{"flush=1h0m0s", time.Hour, 5000, false},
		{"MidBuffer", time.Hour, 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := s.rig(t, pool.Config{Buffers: 4}, 1)
			client, l := g.Conn(tc.flush)
			data := RandomBytes(9, tc.size)
			if _, err := client.Write(data); err != nil {
				t.Fatal(err)
			}
			// Once the peer acknowledged every byte they sit in the lane's
			// socket (or buffer), and must come out before the reset.
			g.WaitUntil("the bytes to be acknowledged", func() bool {
				n, err := unacked(client)
				if err != nil {
					t.Skipf("cannot tell when the peer has the bytes: %v", err)
				}
				return n == 0
			})
			if tc.midBuffer {
				// Less than a buffer, written at once: the lane's first read
				// takes it all, and the hour-long flush keeps it in the
				// buffer.
				g.WaitUntil("the lane to read the bytes", func() bool {
					return g.R.Stats().Reads >= 1 && l.Account.Stats().Held == 1
				})
				if n := g.Rec.Lane(l.ID).Bytes; n != 0 {
					t.Fatalf("%d bytes emitted before the reset: want them held", n)
				}
			}
			if err := client.SetLinger(0); err != nil {
				t.Fatal(err)
			}
			client.Close() // RST
			lr := g.Finish(l)
			if !errors.Is(lr.Err, srcs.ErrReset) || !errors.Is(lr.Err, syscall.ECONNRESET) {
				t.Errorf("finished with %v, want srcs.ErrReset wrapping ECONNRESET", lr.Err)
			}
			if lr.Bytes != int64(len(data)) || lr.CRC != CRC(data) || lr.Partials == 0 {
				t.Errorf("got %d bytes crc %08x in %d partial chunks, want the %d (crc %08x) sent before the reset, the last partial",
					lr.Bytes, lr.CRC, lr.Partials, len(data), CRC(data))
			}
		})
	}
}

// slowConsumer holds every emitted buffer: the lanes must run the pool dry
// without passing their cap, then stop reading (no polling, no spinning) so
// that the kernel throttles the senders, and deliver everything once the
// consumer catches up.
func (s suite) slowConsumer(t *testing.T) {
	const buffers, lanes, size = 8, 4, 4 << 20
	g := s.rig(t, pool.Config{Buffers: buffers, MaxPerSource: 2}, 2)
	g.Rec.Hold = true
	want := map[srcs.ID]uint32{}
	var written atomic.Int64
	var clients []*net.TCPConn
	var wg sync.WaitGroup
	// Registered before the clients' cleanups, so it runs after they
	// close the clients, which ends blocked writers if the test fails.
	t.Cleanup(wg.Wait)
	for i := range lanes {
		client, server := g.Dial()
		clients = append(clients, client)
		// Fixed socket buffers (no autotuning), so that the senders block
		// long before the end of their data. Much smaller ones would
		// shrink the window enough to slow TCP itself to a crawl.
		server.SetReadBuffer(256 << 10)
		client.SetWriteBuffer(16 << 10)
		l := g.Add(s.source(server), time.Millisecond)
		data := RandomBytes(uint64(100+i), size)
		want[l.ID] = CRC(data)
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

	g.WaitUntil("the pool to run dry", func() bool {
		if n := g.Rec.Held(); n > buffers {
			t.Fatalf("%d buffers downstream, the pool has %d", n, buffers)
		}
		return g.Rec.Held() == buffers
	})
	if st := g.Pool.Stats(); st.InUse != buffers {
		t.Fatalf("pool: %d in use, want all %d", st.InUse, buffers)
	}
	for _, l := range g.Lanes() {
		if st := l.Account.Stats(); st.Held > 2 {
			t.Errorf("lane %d holds %d buffers, more than its cap of 2", l.ID, st.Held)
		}
	}
	// Let the senders fill the socket buffers, then watch nothing move. A
	// sender that has not written for a while may only be starved of CPU:
	// a blocked one has bytes its peer cannot take (where the system says).
	g.WaitUntil("the senders to block", func() bool {
		before := written.Load()
		time.Sleep(50 * time.Millisecond)
		for _, c := range clients {
			if n, err := unacked(c); err == nil && n == 0 {
				return false
			}
		}
		return written.Load() == before
	})
	w0, st0 := written.Load(), g.R.Stats()
	time.Sleep(300 * time.Millisecond)
	w1, st1 := written.Load(), g.R.Stats()
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
	if n := g.Rec.Held(); n != buffers {
		t.Errorf("%d buffers downstream, want all %d", n, buffers)
	}
	select {
	case lr := <-g.Rec.Finished():
		t.Fatalf("lane %d finished (%v) while the consumer held every buffer", lr.ID, lr.Err)
	default:
	}

	got := map[srcs.ID]*srcstest.LaneRecord{}
	deadline := time.After(finishTimeout)
	for len(got) < lanes {
		if n := g.Rec.Held(); n > buffers {
			t.Fatalf("%d buffers downstream, the pool has %d", n, buffers)
		}
		g.Rec.ReleaseAll()
		select {
		case lr := <-g.Rec.Finished():
			got[lr.ID] = lr
		case <-g.Rec.Emitted():
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

// idleLanes connects many silent sources: none of them may take a buffer,
// not even to try a read. Removing idle lanes ends their waits for
// readiness; lanes that each receive one buffer's worth emit it and give
// back the buffer they take to find the socket empty.
func (s suite) idleLanes(t *testing.T) {
	if s.IdleHoldsBuffer {
		t.Skip("a lane of this runner holds a buffer while it waits for data")
	}
	const idle, active, removed, filled = 500, 10, 100, 300
	g := s.rig(t, pool.Config{Buffers: 64}, 2)
	clients := make([]*net.TCPConn, idle)
	lanes := make([]*contract.Lane, idle)
	for i := range idle {
		clients[i], lanes[i] = g.Conn(time.Millisecond)
	}
	if s.LaneWorkers {
		// A silent lane waits for readiness exactly once.
		g.WaitUntil("every lane to wait for data", func() bool { return g.R.Stats().Waits >= idle })
	}
	// Lanes added last reach every worker after the idle lanes: once they
	// are done, every idle lane has been registered and looked at.
	var busy []*contract.Lane
	for range active {
		c, l := g.Conn(0)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, l)
	}
	for _, l := range busy {
		g.WaitUntil("the active lanes' bytes", func() bool { return g.Rec.Lane(l.ID).Bytes == 1 })
		g.R.Remove(l)
	}
	g.Finished(active)
	barrier(g.R)
	st := g.Pool.Stats()
	if st.InUse != 0 || st.Waiters != 0 {
		t.Errorf("%d idle lanes: %d buffers in use, %d waiters; want none", idle, st.InUse, st.Waiters)
	}
	// The active lanes need one buffer per read, and perhaps one more to
	// find the socket empty; the idle ones need none.
	if st.Acquired > 3*active {
		t.Errorf("%d buffers acquired for %d active and %d idle lanes", st.Acquired, active, idle)
	}
	if rs := g.R.Stats(); rs.Lanes != idle {
		t.Errorf("runner drives %d lanes, want %d", rs.Lanes, idle)
	}

	for _, l := range lanes[:removed] {
		g.R.Remove(l)
	}
	for id, lr := range g.Finished(removed) {
		if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 0 {
			t.Errorf("idle lane %d removed: finished with %v after %d bytes", id, lr.Err, lr.Bytes)
		}
	}

	full := make([]byte, g.Pool.BufSize())
	fill := clients[removed : removed+filled]
	for _, c := range fill {
		if _, err := c.Write(full); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range lanes[removed : removed+filled] {
		g.WaitUntil("a buffer's worth on every filled lane", func() bool { return g.Rec.Lane(l.ID).Bytes == int64(len(full)) })
	}
	// Lanes that queued for a buffer behind the others get it, find the
	// socket empty and give it back one grant at a time.
	g.WaitUntil("drained lanes to give back every buffer", func() bool { return g.Pool.Stats().InUse == 0 })
	for _, c := range fill {
		c.Close()
	}
	for id, lr := range g.Finished(filled) {
		if !errors.Is(lr.Err, io.EOF) || lr.Bytes != int64(len(full)) {
			t.Errorf("lane %d: finished with %v after %d bytes, want io.EOF after %d", id, lr.Err, lr.Bytes, len(full))
		}
	}

	if err := g.R.Close(); err != nil {
		t.Fatal(err)
	}
	for id, lr := range g.Finished(idle - removed - filled) {
		if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 0 {
			t.Errorf("idle lane %d: %v after %d bytes", id, lr.Err, lr.Bytes)
		}
	}
}

// file reads regular files, from offsets, to their end; and a large one
// through srcs.FileSource, the file source users have, into large
// buffers (fileLarge).
func (s suite) file(t *testing.T) {
	t.Run("Large", s.fileLarge)
	for _, tc := range []struct {
		name         string
		size, offset int
		flush        time.Duration
	}{
		{"Whole", 1<<20 + 123, 0, time.Hour},
		{"Offset", 300<<10 + 1, 4097, 0},
		{"SmallOffset", 1<<20 + 123, 100, time.Millisecond},
		{"Empty", 0, 0, time.Millisecond},
		{"PastEnd", 100, 200, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := RandomBytes(uint64(tc.size), tc.size)
			g := s.rig(t, pool.Config{Buffers: 8}, 1)
			g.Rec.Keep = true
			l := g.Add(&FileSource{F: TempFile(t, data), Off: int64(tc.offset)}, tc.flush)
			lr := g.Finish(l)
			if !errors.Is(lr.Err, io.EOF) {
				t.Errorf("finished with %v, want io.EOF", lr.Err)
			}
			if want := data[min(tc.offset, len(data)):]; !bytes.Equal(lr.Data, want) {
				t.Errorf("got %d bytes, want %d bytes from offset %d, byte-exact", len(lr.Data), len(want), tc.offset)
			}
		})
	}
}

// fileLarge reads 256 MiB of a file opened by srcs.NewFile through 64
// buffers of 256 KiB, each buffer used many times over: every byte
// arrives, in order.
func (s suite) fileLarge(t *testing.T) {
	const size = 256 << 20
	path := filepath.Join(t.TempDir(), "large")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := crc32.New(srcstest.Castagnoli)
	_, err = io.CopyN(io.MultiWriter(f, h), rand.NewChaCha8([32]byte{1}), size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	src, err := srcs.NewFile(srcs.FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := s.rig(t, pool.Config{BufSize: 256 << 10, Buffers: 64}, 1)
	l := g.Add(src, time.Hour)
	lr := g.Finish(l)
	if !errors.Is(lr.Err, io.EOF) || lr.Bytes != size || lr.CRC != h.Sum32() {
		t.Errorf("finished with %v after %d bytes crc %08x, want io.EOF after %d crc %08x", lr.Err, lr.Bytes, lr.CRC, size, h.Sum32())
	}
}

// fileFairness reads a large file, which is always readable, next to a
// socket on the same worker: the socket's data must not wait for the end
// of the file.
func (s suite) fileFairness(t *testing.T) {
	if s.LaneWorkers {
		// Each lane has a goroutine or thread of its own: whether the
		// socket's is scheduled before the file's ends is the scheduler's
		// doing, not the runner's, and a busy machine may not.
		t.Skip("lanes do not share a worker")
	}
	const size = 16 << 20
	g := s.rig(t, pool.Config{Buffers: 16}, 1)
	client, server := g.Dial()
	sock := g.Lane(s.source(server), 0)
	file := g.Lane(&FileSource{F: TempFile(t, RandomBytes(1, size))}, time.Hour)
	o := &order{Recorder: g.Rec, file: file.ID, sock: sock.ID, firstFile: make(chan struct{})}
	sock.Out, file.Out = o, o
	for _, l := range []*contract.Lane{sock, file} {
		if err := g.R.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-o.firstFile:
	case <-time.After(waitTimeout):
		t.Fatal("no data from the file")
	}
	if _, err := client.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	lr := g.Finish(file)
	if lr.Bytes != size || !errors.Is(lr.Err, io.EOF) {
		t.Errorf("file: %d bytes, %v", lr.Bytes, lr.Err)
	}
	g.WaitUntil("the socket's byte", func() bool { return g.Rec.Lane(sock.ID).Bytes == 1 })
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.log) != 3 || o.log[1] != "sock emit" {
		t.Errorf("events %q: the socket waited for the file", o.log)
	}
}

// order forwards to a Recorder and logs, in order, the file lane's first
// emit, the socket lane's emits and the file lane's Finish.
type order struct {
	*srcstest.Recorder
	file, sock srcs.ID
	firstFile  chan struct{}

	mu  sync.Mutex
	log []string
}

func (o *order) Emit(l *contract.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
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

func (o *order) Finish(l *contract.Lane, err error) {
	o.mu.Lock()
	if l.ID == o.file {
		o.log = append(o.log, "file finish")
	}
	o.mu.Unlock()
	o.Recorder.Finish(l, err)
}

// descriptors reads streams that are no TCP connection, handed over as
// raw descriptors in blocking mode: a unix socket and a pipe (polled, then
// read without blocking, where the runner polls).
func (s suite) descriptors(t *testing.T) {
	for _, tc := range []struct {
		name string
		pair func(t *testing.T) (int, int)
	}{
		{"UnixStream", func(t *testing.T) (int, int) { return Socketpair(t, unix.SOCK_STREAM) }},
		{"Pipe", func(t *testing.T) (int, int) { return Pipe(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := s.rig(t, pool.Config{Buffers: 8}, 1)
			r, w := tc.pair(t)
			l := g.Add(&FDSource{FD: r, Kind: contract.Stream}, time.Millisecond)
			data := RandomBytes(3, 1<<20)
			go func() {
				defer unix.Close(w)
				for off := 0; off < len(data); {
					n, err := unix.Write(w, data[off:])
					if err != nil && err != unix.EINTR {
						return
					}
					off += max(n, 0)
				}
			}()
			lr := g.Finish(l)
			if !errors.Is(lr.Err, io.EOF) || lr.Bytes != int64(len(data)) || lr.CRC != CRC(data) {
				t.Errorf("got %d bytes (%v), want %d and io.EOF", lr.Bytes, lr.Err, len(data))
			}
		})
	}
}

// addErrors adds what the runner must refuse: malformed lanes, and a lane
// it drives already. None of them may leave state behind.
func (s suite) addErrors(t *testing.T) {
	g := s.rig(t, pool.Config{Buffers: 4}, 1)
	for _, l := range []*contract.Lane{nil, {}, {Src: NoDesc{}}} {
		if err := g.R.Add(l); err == nil {
			t.Errorf("Add(%+v) succeeded", l)
		}
	}
	_, l := g.Conn(0)
	if err := g.R.Add(l); err == nil {
		t.Error("second Add of a lane succeeded")
	}
	if st := g.R.Stats(); st.Lanes != 1 {
		t.Errorf("after failed Adds: %d lanes, want 1", st.Lanes)
	}
	g.R.Remove(l)
	if lr := g.Finish(l); !errors.Is(lr.Err, srcs.ErrStopped) {
		t.Errorf("finished with %v, want srcs.ErrStopped", lr.Err)
	}
}

// TestDescriptorAdmission checks what a runner that reads descriptors
// itself (uring, epoll, thread) refuses and how it reads what it admits,
// the same on each: a directory is refused with EISDIR, and a regular
// file given as a Stream is read from where its position stands, like a
// File.
func TestDescriptorAdmission(t *testing.T, newRunner New) {
	g := NewRig(t, newRunner, RigConfig{Pool: pool.Config{Buffers: 8}})
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	dfd, err := unix.Dup(int(dir.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	// The rig closes every lane's source at its end, refused or not.
	if err := g.R.Add(g.Lane(&FDSource{FD: dfd, Kind: contract.Stream}, 0)); !errors.Is(err, unix.EISDIR) {
		t.Errorf("a directory as a Stream: %v, want EISDIR", err)
	}
	if st := g.R.Stats(); st.Lanes != 0 {
		t.Errorf("after a refused Add: %d lanes", st.Lanes)
	}
	data := RandomBytes(5, 200<<10)
	f := TempFile(t, data)
	if _, err := f.Seek(1000, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	ffd, err := unix.Dup(int(f.Fd())) // the source closes its own
	if err != nil {
		t.Fatal(err)
	}
	l := g.Add(&FDSource{FD: ffd, Kind: contract.Stream}, 0)
	want := data[1000:]
	if lr := g.Finish(l); lr.Err != io.EOF || lr.Bytes != int64(len(want)) || lr.CRC != CRC(want) {
		t.Errorf("a file as a Stream, from offset 1000: Finish(%v) after %d bytes crc %08x; want io.EOF after %d crc %08x",
			lr.Err, lr.Bytes, lr.CRC, len(want), CRC(want))
	}
}
