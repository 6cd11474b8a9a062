package fallback_test

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
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/runnertest"
	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// runner is engine.Runner, as the runner suite states it (engine imports
// this package).
type runner = runnertest.Runner

var (
	_ runner = (*fallback.Goroutine)(nil)
	_ runner = (*fallback.Thread)(nil)
)

// suiteCase says how to build a runner, and how to turn an accepted
// connection into a source, for the shared runner suite.
type suiteCase struct {
	newRunner func(cfg srcs.RunnerConfig) (runner, error)
	// wrap makes the source for an accepted connection; nil means
	// srcs.NewConn.
	wrap func(c net.Conn) srcs.Source
}

// runSuite runs the behaviour every runner shares (the runner contract)
// against one runner. Each subtest builds its own pool and proves at the
// end, by closing it, that every buffer came home.
func runSuite(t *testing.T, sc suiteCase) {
	tests := []struct {
		name string
		fn   func(t *testing.T, sc suiteCase)
	}{
		{"ManyConns", testManyConns},
		{"PartialFlush", testPartialFlush},
		{"Reset", testReset},
		{"SmallPool", testSmallPool},
		{"SlowConsumer", testSlowConsumer},
		{"Pause", testPause},
		{"FlushWhilePaused", testFlushWhilePaused},
		{"RemovePartial", testRemovePartial},
		{"CloseWhilePaused", testCloseWhilePaused},
		{"CloseInFlight", testCloseInFlight},
		{"File", testFile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, sc) })
	}
}

func newGoroutine(cfg srcs.RunnerConfig) (runner, error) { return fallback.NewGoroutine(cfg) }

func TestGoroutine(t *testing.T) {
	newRunner := newGoroutine
	for _, tc := range []struct {
		name string
		wrap func(c net.Conn) srcs.Source
	}{
		// srcs.Conn as it is: acquire first, then Read.
		{"Conn", nil},
		// A source that also exposes its RawConn: wait for readability
		// on the netpoller first, then acquire.
		{"RawConn", rawConnSource},
	} {
		t.Run(tc.name, func(t *testing.T) { runSuite(t, suiteCase{newRunner: newRunner, wrap: tc.wrap}) })
	}
}

// rig is one runner under test with its pool, recorder and listener.
type rig struct {
	t      *testing.T
	sc     suiteCase
	pool   *pool.Pool
	rec    *srcstest.Recorder
	r      runner
	ln     net.Listener
	lanes  []*srcs.Lane
	nextID srcs.ID
	closed bool
}

func newRig(t *testing.T, sc suiteCase, buffers int, cfg srcs.RunnerConfig) *rig {
	t.Helper()
	p, err := pool.New(pool.Config{BufSize: 4096, Buffers: buffers})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pool = p
	r, err := sc.newRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &rig{t: t, sc: sc, pool: p, rec: srcstest.NewRecorder(), r: r, ln: ln}
	t.Cleanup(g.shutdown)
	return g
}

// conn connects a client to a new lane and adds the lane.
func (g *rig) conn(flush time.Duration) (*net.TCPConn, *srcs.Lane) {
	g.t.Helper()
	client, err := net.Dial("tcp", g.ln.Addr().String())
	if err != nil {
		g.t.Fatal(err)
	}
	server, err := g.ln.Accept()
	if err != nil {
		g.t.Fatal(err)
	}
	var src srcs.Source = srcs.NewConn(server)
	if g.sc.wrap != nil {
		src = g.sc.wrap(server)
	}
	g.t.Cleanup(func() { client.Close() })
	return client.(*net.TCPConn), g.add(src, flush)
}

// add makes a lane for src and adds it to the runner.
func (g *rig) add(src srcs.Source, flush time.Duration) *srcs.Lane {
	g.t.Helper()
	l := g.lane(src, flush)
	if err := g.r.Add(l); err != nil {
		g.t.Fatalf("add: %v", err)
	}
	return l
}

// lane makes a lane for src without adding it.
func (g *rig) lane(src srcs.Source, flush time.Duration) *srcs.Lane {
	g.nextID++
	l := &srcs.Lane{ID: g.nextID, Src: src, Account: g.pool.Join(g.nextID), Flush: flush, Out: g.rec}
	g.lanes = append(g.lanes, l)
	return l
}

// shutdown does what the engine does at the end: close the runner, then
// the sources, then the pool, which fails if any buffer did not come home.
func (g *rig) shutdown() {
	if g.closed {
		return
	}
	g.closed = true
	t := g.t
	if err := g.r.Close(); err != nil {
		t.Errorf("runner close: %v", err)
	}
	if n := g.r.Stats().Lanes; n != 0 {
		t.Errorf("after Close: %d lanes still driven", n)
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

// waitUntil polls cond until it holds, waking on emits, or fails the test.
func (g *rig) waitUntil(timeout time.Duration, what string, cond func() bool) {
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

// finish waits for one lane's Finish, failing after timeout.
func (g *rig) finish(l *srcs.Lane, timeout time.Duration) *srcstest.LaneRecord {
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

// sendRandom writes size random bytes in random pieces with random pauses,
// then closes the connection, and returns the CRC-32C of what it sent.
func sendRandom(c net.Conn, seed uint64, size, maxPiece int, maxPause time.Duration) (uint32, error) {
	rng := rand.New(rand.NewPCG(seed, 0x51))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	defer c.Close()
	for off := 0; off < size; {
		n := min(size-off, 1+rng.IntN(maxPiece))
		if _, err := c.Write(data[off : off+n]); err != nil {
			return 0, err
		}
		off += n
		if maxPause > 0 && rng.IntN(2) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(maxPause))))
		}
	}
	return crc32.Checksum(data, srcstest.Castagnoli), nil
}

type sent struct {
	size int
	crc  uint32
}

// streams runs n lanes, each receiving a random stream from its own
// client, and checks that every lane delivers exactly what was sent and
// ends with io.EOF.
func (g *rig) streams(n, maxSize, maxPiece int, maxPause, flush time.Duration) {
	t := g.t
	want := make(map[srcs.ID]sent, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		client, l := g.conn(flush)
		size := rand.IntN(maxSize + 1)
		if i == 0 {
			size = 0 // a stream that ends before its first byte
		}
		wg.Go(func() {
			crc, err := sendRandom(client, uint64(l.ID), size, maxPiece, maxPause)
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			want[l.ID] = sent{size, crc}
			mu.Unlock()
		})
	}
	sentAll := make(chan struct{})
	go func() { wg.Wait(); close(sentAll) }()
	select {
	case <-sentAll:
	case <-time.After(60 * time.Second):
		// The cleanups close the clients, which ends the writers.
		t.Fatal("clients could not send: the runner stopped reading")
	}
	close(errc)
	for err := range errc {
		t.Fatalf("client: %v", err)
	}
	got, err := g.rec.WaitFinished(n, 60*time.Second)
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
	if err := g.rec.Err(); err != nil {
		t.Error(err)
	}
}

func testManyConns(t *testing.T, sc suiteCase) {
	g := newRig(t, sc, 64, srcs.RunnerConfig{})
	g.streams(200, 48<<10, 6000, time.Millisecond, 5*time.Millisecond)
	if n := g.pool.Stats().InUse; n != 0 {
		t.Errorf("after every lane ended: %d buffers in use", n)
	}
}

func testSmallPool(t *testing.T, sc suiteCase) {
	g := newRig(t, sc, 8, srcs.RunnerConfig{})
	g.streams(100, 32<<10, 4096, 0, 2*time.Millisecond)
}

func testPartialFlush(t *testing.T, sc suiteCase) {
	const flush = 100 * time.Millisecond
	g := newRig(t, sc, 4, srcs.RunnerConfig{})
	client, l := g.conn(flush)
	for i, msg := range []string{"hello", "world"} {
		start := time.Now()
		if _, err := client.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		g.waitUntil(5*time.Second, "a partial flush", func() bool { return g.rec.Lane(l.ID).Partials == i+1 })
		if d := time.Since(start); d < flush {
			t.Errorf("chunk %d emitted %v after the write, before the %v flush timeout", i, d, flush)
		}
		lr := g.rec.Lane(l.ID)
		if lr.Bytes != int64(5*(i+1)) || lr.Chunks != i+1 {
			t.Errorf("after chunk %d: %d bytes in %d chunks", i, lr.Bytes, lr.Chunks)
		}
		// A lane that held its data for much less than the timeout has
		// not waited for more; allow for a coarse clock.
		if lr.MaxHoldTime < flush-5*time.Millisecond || lr.MaxHoldTime > flush+2*time.Second {
			t.Errorf("chunk %d held for %v, want about %v", i, lr.MaxHoldTime, flush)
		}
	}
	client.Close()
	lr := g.finish(l, 5*time.Second)
	if !errors.Is(lr.Err, io.EOF) || lr.Bytes != 10 {
		t.Errorf("finished with %v after %d bytes, want io.EOF after 10", lr.Err, lr.Bytes)
	}
}

func testReset(t *testing.T, sc suiteCase) {
	g := newRig(t, sc, 4, srcs.RunnerConfig{})
	client, l := g.conn(0)
	data := bytes.Repeat([]byte("reset me"), 125)
	if _, err := client.Write(data); err != nil {
		t.Fatal(err)
	}
	g.waitUntil(5*time.Second, "the bytes before the reset", func() bool { return g.rec.Lane(l.ID).Bytes == int64(len(data)) })
	if err := client.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	client.Close() // RST
	lr := g.finish(l, 5*time.Second)
	if !errors.Is(lr.Err, srcs.ErrReset) {
		t.Errorf("finished with %v, want srcs.ErrReset", lr.Err)
	}
	if lr.Bytes != int64(len(data)) || lr.CRC != crc32.Checksum(data, srcstest.Castagnoli) {
		t.Errorf("got %d bytes, want the %d sent before the reset", lr.Bytes, len(data))
	}
}

func testSlowConsumer(t *testing.T, sc suiteCase) {
	const buffers, lanes, size = 16, 4, 256 << 10
	g := newRig(t, sc, buffers, srcs.RunnerConfig{})
	g.rec.Hold = true
	want := map[srcs.ID]uint32{}
	var wg sync.WaitGroup
	// Registered before the clients' cleanups, so it runs after they
	// close the clients, which ends blocked writers if the test fails.
	t.Cleanup(wg.Wait)
	for range lanes {
		client, l := g.conn(20 * time.Millisecond)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rand.Uint32())
		}
		want[l.ID] = crc32.Checksum(data, srcstest.Castagnoli)
		wg.Go(func() {
			defer client.Close()
			client.Write(data)
		})
	}
	// The consumer holds everything: the runner must run dry and wait,
	// with every buffer downstream, rather than fail or spin.
	g.waitUntil(10*time.Second, "the pool to run dry", func() bool { return g.rec.Held() == buffers })
	if st := g.pool.Stats(); st.InUse != buffers {
		t.Fatalf("pool: %d in use, want all %d", st.InUse, buffers)
	}
	select {
	case lr := <-g.rec.Finished():
		t.Fatalf("lane %d finished (%v) while the consumer held every buffer", lr.ID, lr.Err)
	case <-time.After(50 * time.Millisecond):
	}
	got := map[srcs.ID]*srcstest.LaneRecord{}
	deadline := time.After(30 * time.Second)
	for len(got) < lanes {
		if n := g.rec.Held(); n > buffers {
			t.Fatalf("%d buffers in flight, pool has %d", n, buffers)
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

func testPause(t *testing.T, sc suiteCase) {
	g := newRig(t, sc, 8, srcs.RunnerConfig{})
	client, l := g.conn(0)
	piece := []byte("0123456789")
	bytesNow := func() int64 { return g.rec.Lane(l.ID).Bytes }
	if _, err := client.Write(piece); err != nil {
		t.Fatal(err)
	}
	g.waitUntil(5*time.Second, "the first piece", func() bool { return bytesNow() == 10 })

	g.r.SetPaused(true)
	g.r.SetPaused(true) // idempotent
	before := g.r.Stats()
	// A read in flight when the pause began may complete with the next
	// piece; the one after it must wait for the resume.
	for range 2 {
		if _, err := client.Write(piece); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := bytesNow(); n > 20 {
		t.Fatalf("paused runner read on: %d bytes", n)
	}
	// Nor may it spin on a readable source it must not read.
	if after := g.r.Stats(); after.Reads-before.Reads > 1 || after.Waits-before.Waits > 10 {
		t.Errorf("while paused: %d reads and %d waits", after.Reads-before.Reads, after.Waits-before.Waits)
	}
	g.r.SetPaused(false)
	g.waitUntil(5*time.Second, "reads to resume", func() bool { return bytesNow() == 30 })

	g.r.SetPaused(true)
	if _, err := client.Write(piece); err != nil {
		t.Fatal(err)
	}
	g.r.Remove(l)
	lr := g.finish(l, 5*time.Second)
	if !errors.Is(lr.Err, srcs.ErrStopped) {
		t.Errorf("removed while paused: finished with %v, want srcs.ErrStopped", lr.Err)
	}
	g.r.Remove(l) // after Finish: a no-op
	g.r.SetPaused(false)
	if st := g.r.Stats(); st.Lanes != 0 {
		t.Errorf("after Finish: %d lanes", st.Lanes)
	}
	if g.pool.Stats().InUse != 0 {
		t.Errorf("removed lane still holds a buffer")
	}
}

func testFlushWhilePaused(t *testing.T, sc suiteCase) {
	const flush = 80 * time.Millisecond
	g := newRig(t, sc, 4, srcs.RunnerConfig{})
	client, l := g.conn(flush)
	if _, err := client.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	g.waitUntil(5*time.Second, "the read", func() bool { return g.r.Stats().Reads >= 1 })
	g.r.SetPaused(true)
	g.waitUntil(5*time.Second, "a flush while paused", func() bool { return g.rec.Lane(l.ID).Partials == 1 })
	if lr := g.rec.Lane(l.ID); lr.Bytes != 4 {
		t.Errorf("flushed %d bytes, want 4", lr.Bytes)
	}
	// The flushed lane holds nothing while paused.
	g.waitUntil(time.Second, "the pool to drain", func() bool { return g.pool.Stats().InUse == 0 })
	g.r.SetPaused(false)
}

func testRemovePartial(t *testing.T, sc suiteCase) {
	g := newRig(t, sc, 4, srcs.RunnerConfig{})
	client, l := g.conn(time.Hour)
	if _, err := client.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	g.waitUntil(5*time.Second, "the read", func() bool { return g.r.Stats().Reads >= 1 })
	g.r.Remove(l)
	lr := g.finish(l, 5*time.Second)
	if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 7 || lr.Partials != 1 {
		t.Errorf("removed: %v after %d bytes in %d partials, want srcs.ErrStopped after 7 in 1", lr.Err, lr.Bytes, lr.Partials)
	}
	// The source is still open: the runner stopped without closing it.
	if _, err := client.Write([]byte("more")); err != nil {
		t.Errorf("write after Remove: %v", err)
	}
}

func testCloseWhilePaused(t *testing.T, sc suiteCase) {
	g := newRig(t, sc, 4, srcs.RunnerConfig{})
	var lanes []*srcs.Lane
	for range 3 {
		client, l := g.conn(time.Hour)
		client.Write([]byte("x"))
		lanes = append(lanes, l)
	}
	g.r.SetPaused(true)
	done := make(chan error, 1)
	go func() { done <- g.r.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung while paused")
	}
	got, err := g.rec.WaitFinished(len(lanes), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lanes {
		if !errors.Is(got[l.ID].Err, srcs.ErrStopped) {
			t.Errorf("lane %d: %v, want srcs.ErrStopped", l.ID, got[l.ID].Err)
		}
	}
	if err := g.r.Close(); err != nil { // idempotent
		t.Error(err)
	}
}

func testCloseInFlight(t *testing.T, sc suiteCase) {
	const lanes = 20
	g := newRig(t, sc, 16, srcs.RunnerConfig{})
	var wg sync.WaitGroup
	for i := range lanes {
		client, _ := g.conn(time.Duration(i%3) * time.Millisecond)
		wg.Go(func() {
			buf := make([]byte, 1+rand.IntN(8192))
			for {
				if _, err := client.Write(buf); err != nil {
					return
				}
			}
		})
	}
	g.waitUntil(10*time.Second, "traffic on every lane", func() bool {
		for _, l := range g.lanes {
			if g.rec.Lane(l.ID).Bytes == 0 {
				return false
			}
		}
		return true
	})
	if err := g.r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.r.Add(g.lane(srcs.NewConn(mustPipeConn(t)), 0)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Add after Close: %v, want net.ErrClosed", err)
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
	if st := g.r.Stats(); st.Lanes != 0 || st.Threads != 0 {
		t.Errorf("after Close: %+v", st)
	}
	g.shutdown() // closes the sources, which stops the writers
	wg.Wait()
	goleak.VerifyNone(t)
}

// mustPipeConn returns one end of an in-memory connection that the test
// closes; for lanes that are never driven.
func mustPipeConn(t *testing.T) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}

func testFile(t *testing.T, sc suiteCase) {
	const size, offset = 1<<20 + 123, 100
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	g := newRig(t, sc, 8, srcs.RunnerConfig{})
	g.rec.Keep = true
	l := g.add(&fileSource{f: f, off: offset}, time.Millisecond)
	lr := g.finish(l, 20*time.Second)
	if !errors.Is(lr.Err, io.EOF) {
		t.Errorf("finished with %v, want io.EOF", lr.Err)
	}
	if !bytes.Equal(lr.Data, data[offset:]) {
		t.Errorf("got %d bytes, want %d bytes from offset %d, byte-exact", len(lr.Data), size-offset, offset)
	}
}

// fileSource is a regular file read from an offset, through Read or as a
// File descriptor.
type fileSource struct {
	f   *os.File
	off int64
}

func (s *fileSource) Name() string                   { return s.f.Name() }
func (s *fileSource) Open(ctx context.Context) error { return nil }
func (s *fileSource) Close() error                   { return s.f.Close() }

func (s *fileSource) Read(p []byte) (int, error) {
	n, err := s.f.ReadAt(p, s.off)
	s.off += int64(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

func (s *fileSource) Desc() (srcs.Desc, error) {
	return srcs.Desc{FD: int(s.f.Fd()), Kind: srcs.File, Offset: s.off}, nil
}

// rawConnSource wraps a connection as a srcs.Conn that also exposes its
// syscall.RawConn, as srcs.Conn might one day.
func rawConnSource(c net.Conn) srcs.Source {
	return &rawConn{Conn: srcs.NewConn(c), sc: c.(syscall.Conn)}
}

type rawConn struct {
	*srcs.Conn
	sc syscall.Conn
}

func (c *rawConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// plainSource hides every optional capability of a source.
type plainSource struct{ srcs.Source }

func TestGoroutineIdleLanesHoldNoBuffer(t *testing.T) {
	const lanes = 50
	g := newRig(t, suiteCase{
		newRunner: newGoroutine,
		wrap:      rawConnSource,
	}, 8, srcs.RunnerConfig{})
	var clients []net.Conn
	for range lanes {
		c, _ := g.conn(time.Millisecond)
		clients = append(clients, c)
	}
	g.waitUntil(5*time.Second, "every lane to wait for data", func() bool { return g.r.Stats().Waits >= lanes })
	if n := g.pool.Stats().InUse; n != 0 {
		t.Errorf("%d idle lanes hold %d buffers, want none", lanes, n)
	}
	for _, c := range clients {
		c.Write([]byte("ping"))
		c.Close()
	}
	got, err := g.rec.WaitFinished(lanes, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if lr.Bytes != 4 || !errors.Is(lr.Err, io.EOF) {
			t.Errorf("lane %d: %d bytes, %v", id, lr.Bytes, lr.Err)
		}
	}
}

// Without a deadline the runner cannot wake a blocked Read: it emits every
// read at once, and Remove waits for the current Read to return.
func TestGoroutineNoDeadline(t *testing.T) {
	g := newRig(t, suiteCase{
		newRunner: newGoroutine,
		wrap:      func(c net.Conn) srcs.Source { return plainSource{srcs.NewConn(c)} },
	}, 4, srcs.RunnerConfig{})
	client, l := g.conn(time.Hour)
	if _, err := client.Write([]byte("now")); err != nil {
		t.Fatal(err)
	}
	g.waitUntil(5*time.Second, "an immediate emit", func() bool { return g.rec.Lane(l.ID).Partials == 1 })
	g.waitUntil(5*time.Second, "the next read", func() bool { return g.r.Stats().Reads >= 1 })
	g.r.Remove(l)
	if _, err := client.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	lr := g.finish(l, 5*time.Second)
	if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes < 3 {
		t.Errorf("finished with %v after %d bytes", lr.Err, lr.Bytes)
	}
}

func TestGoroutineAddErrors(t *testing.T) {
	r, err := fallback.NewGoroutine(srcs.RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Name() != "goroutine" {
		t.Errorf("Name() = %q", r.Name())
	}
	for _, l := range []*srcs.Lane{nil, {}, {Src: plainSource{}}} {
		if err := r.Add(l); err == nil {
			t.Errorf("Add(%+v) succeeded", l)
		}
	}
}
