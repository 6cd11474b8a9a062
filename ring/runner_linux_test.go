package ring

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// rig is one runner under test with its pool and recorder. Its cleanup
// closes the runner, then the sources, then releases what the recorder
// holds and requires the pool to close: every buffer came home.
type rig struct {
	t    *testing.T
	pool *pool.Pool
	run  *Runner
	rec  *srcstest.Recorder
	log  *bytes.Buffer

	// closeErr, when set, is what Close must report (a worker failure);
	// leaked is how many buffers must stay in use for good, so the pool
	// cannot close.
	closeErr error
	leaked   int

	mu   sync.Mutex
	srcs []srcs.Source
}

func newRig(t *testing.T, workers int, pc pool.Config, opts runnerOptions) *rig {
	t.Helper()
	return newRigConfig(t, srcs.RunnerConfig{Workers: workers}, pc, opts)
}

// newRigConfig is newRig with more of the runner's configuration; its
// Pool and Logger are the rig's.
func newRigConfig(t *testing.T, rc srcs.RunnerConfig, pc pool.Config, opts runnerOptions) *rig {
	t.Helper()
	requireURing(t)
	p, err := pool.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	g := &rig{t: t, pool: p, rec: srcstest.NewRecorder(), log: new(bytes.Buffer)}
	log := slog.New(slog.NewTextHandler(g.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rc.Pool, rc.Logger = p, log
	g.run, err = newRunner(rc, opts)
	if err != nil {
		t.Fatalf("newRunner: %v", err)
	}
	t.Cleanup(func() {
		if err := g.run.Close(); (err != nil || g.closeErr != nil) && !errors.Is(err, g.closeErr) {
			t.Errorf("Close: %v, want %v", err, g.closeErr)
		}
		if n := g.run.Stats().Lanes; n != 0 {
			t.Errorf("Stats().Lanes after Close = %d", n)
		}
		g.mu.Lock()
		for _, s := range g.srcs {
			s.Close()
		}
		g.mu.Unlock()
		g.rec.ReleaseAll()
		if err := g.rec.Err(); err != nil {
			t.Error(err)
		}
		if g.leaked > 0 {
			if st := p.Stats(); st.InUse != g.leaked {
				t.Errorf("pool: %d buffers in use after Close, want the %d leaked", st.InUse, g.leaked)
			}
			return
		}
		if err := p.Close(); err != nil {
			t.Errorf("pool.Close: %v (%+v)", err, p.Stats())
		}
	})
	return g
}

// add starts driving src as lane id.
func (g *rig) add(id srcs.ID, src srcs.Source, flush time.Duration) *srcs.Lane {
	g.t.Helper()
	g.mu.Lock()
	g.srcs = append(g.srcs, src)
	g.mu.Unlock()
	l := &srcs.Lane{ID: id, Src: src, Account: g.pool.Join(id), Flush: flush, Out: g.rec}
	if err := g.run.Add(l); err != nil {
		g.t.Fatalf("Add lane %d: %v", id, err)
	}
	return l
}

// tcpPairs returns n connected loopback TCP pairs: the dialed ends, and the
// accepted ends wrapped as sources.
func tcpPairs(t *testing.T, n int) ([]*net.TCPConn, []*srcs.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, n)
	go func() {
		for range n {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	clients := make([]*net.TCPConn, n)
	byAddr := make(map[string]int, n)
	for i := range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		clients[i] = c.(*net.TCPConn)
		byAddr[c.LocalAddr().String()] = i
	}
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	servers := make([]*srcs.Conn, n)
	for range n {
		c, ok := <-accepted
		if !ok {
			t.Fatal("accept failed")
		}
		servers[byAddr[c.RemoteAddr().String()]] = srcs.NewConn(c)
	}
	return clients, servers
}

// waitFor polls cond, for conditions no channel reports.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitBytes waits until the recorder has n bytes for lane id.
func (g *rig) waitBytes(id srcs.ID, n int64) {
	g.t.Helper()
	timeout := time.After(10 * time.Second)
	for g.rec.Lane(id).Bytes < n {
		select {
		case <-g.rec.Emitted():
		case <-timeout:
			g.t.Fatalf("lane %d: %d of %d bytes arrived", id, g.rec.Lane(id).Bytes, n)
		}
	}
}

func randBytes(rnd *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rnd.Uint32())
	}
	return b
}

func crc(b []byte) uint32 { return crc32.Checksum(b, srcstest.Castagnoli) }

// sendRandom writes random bytes in random pieces with random pauses, then
// closes c, and returns what it sent.
func sendRandom(c net.Conn, seed uint64, maxLen int) []byte {
	rnd := rand.New(rand.NewPCG(seed, 7))
	data := randBytes(rnd, rnd.IntN(maxLen+1))
	for rest := data; len(rest) > 0; {
		k := min(len(rest), 1+rnd.IntN(16<<10))
		if _, err := c.Write(rest[:k]); err != nil {
			break
		}
		rest = rest[k:]
		if rnd.IntN(4) == 0 {
			time.Sleep(time.Duration(rnd.IntN(2000)) * time.Microsecond)
		}
	}
	c.Close()
	return data
}

// streamTest sends random data over n connections and checks that every
// lane delivers it exactly and ends with io.EOF.
func streamTest(t *testing.T, g *rig, n, maxLen int, flush time.Duration) {
	clients, servers := tcpPairs(t, n)
	for i, s := range servers {
		g.add(srcs.ID(i+1), s, flush)
	}
	sent := make([][]byte, n)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { sent[i] = sendRandom(c, uint64(i), maxLen) })
	}
	wg.Wait()
	got, err := g.rec.WaitFinished(n, 30*time.Second)
	if err != nil {
		t.Fatalf("%v (pool %+v, runner %+v)", err, g.pool.Stats(), g.run.Stats())
	}
	for i := range n {
		lr := got[srcs.ID(i+1)]
		if lr.Err != io.EOF {
			t.Errorf("lane %d: Finish(%v), want io.EOF", i+1, lr.Err)
		}
		if lr.Bytes != int64(len(sent[i])) || lr.CRC != crc(sent[i]) {
			t.Errorf("lane %d: got %d bytes crc %08x, sent %d crc %08x", i+1, lr.Bytes, lr.CRC, len(sent[i]), crc(sent[i]))
		}
	}
}

func TestRunnerManyConnections(t *testing.T) {
	g := newRig(t, 2, pool.Config{BufSize: 16 << 10, Buffers: 256}, runnerOptions{})
	streamTest(t, g, 1000, 64<<10, 2*time.Millisecond)
	st := g.run.Stats()
	if st.Runner != "uring" || st.Workers != 2 || st.Threads != 2 || st.Reads == 0 || st.Waits == 0 {
		t.Errorf("Stats() = %+v", st)
	}
}

func TestRunnerSmallPool(t *testing.T) {
	// 16 buffers for 1,000 sources: most lanes wait for a buffer at some
	// point, and the FIFO grants must keep every one of them moving.
	g := newRig(t, 2, pool.Config{BufSize: 4 << 10, Buffers: 16}, runnerOptions{})
	streamTest(t, g, 1000, 20<<10, time.Millisecond)
	if st := g.pool.Stats(); st.Waits == 0 {
		t.Errorf("no lane ever waited for a buffer: %+v", st)
	}
}

func TestRunnerFlush(t *testing.T) {
	for _, flush := range []time.Duration{0, 40 * time.Millisecond} {
		t.Run(flush.String(), func(t *testing.T) {
			g := newRig(t, 1, pool.Config{BufSize: 64 << 10, Buffers: 8}, runnerOptions{})
			clients, servers := tcpPairs(t, 1)
			g.add(1, servers[0], flush)
			rnd := rand.New(rand.NewPCG(1, 2))
			first := randBytes(rnd, 100)
			start := time.Now()
			clients[0].Write(first)
			// Nothing more is sent: only the flush deadline can emit.
			g.waitBytes(1, 100)
			waited := time.Since(start)
			lr := g.rec.Lane(1)
			if lr.Partials != lr.Chunks || lr.Chunks == 0 {
				t.Errorf("chunks %d, partial %d: want every chunk partial", lr.Chunks, lr.Partials)
			}
			if flush > 0 && (lr.MaxHoldTime < flush || waited < flush) {
				t.Errorf("held %v (emitted after %v), want the %v flush timeout", lr.MaxHoldTime, waited, flush)
			}
			if lr.MaxHoldTime > flush+2*time.Second {
				t.Errorf("held %v for a %v flush timeout", lr.MaxHoldTime, flush)
			}
			second := randBytes(rnd, 5000)
			clients[0].Write(second)
			clients[0].Close()
			got, err := g.rec.WaitFinished(1, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			all := append(first, second...)
			if lr := got[1]; lr.Err != io.EOF || lr.Bytes != int64(len(all)) || lr.CRC != crc(all) {
				t.Errorf("Finish(%v) with %d bytes crc %08x; want io.EOF, %d bytes crc %08x", lr.Err, lr.Bytes, lr.CRC, len(all), crc(all))
			}
		})
	}
}

func TestRunnerReset(t *testing.T) {
	// A long flush timeout keeps the bytes in a partial buffer: the reset
	// must emit them before Finish reports it.
	g := newRig(t, 1, pool.Config{BufSize: 64 << 10, Buffers: 8}, runnerOptions{})
	clients, servers := tcpPairs(t, 1)
	g.add(1, servers[0], time.Hour)
	data := randBytes(rand.New(rand.NewPCG(3, 4)), 12345)
	if _, err := clients[0].Write(data); err != nil {
		t.Fatal(err)
	}
	clients[0].SetLinger(0)
	clients[0].Close() // RST
	got, err := g.rec.WaitFinished(1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lr := got[1]
	if !errors.Is(lr.Err, srcs.ErrReset) || !errors.Is(lr.Err, unix.ECONNRESET) {
		t.Errorf("Finish(%v), want srcs.ErrReset wrapping ECONNRESET", lr.Err)
	}
	if lr.Bytes != int64(len(data)) || lr.CRC != crc(data) || lr.Partials == 0 {
		t.Errorf("got %d bytes crc %08x in %d partial chunks; want %d bytes crc %08x before the reset",
			lr.Bytes, lr.CRC, lr.Partials, len(data), crc(data))
	}
}

func TestRunnerSlowConsumer(t *testing.T) {
	const buffers = 32
	g := newRig(t, 2, pool.Config{BufSize: 4 << 10, Buffers: buffers}, runnerOptions{})
	g.rec.Hold = true
	const n, size = 8, 512 << 10 // 4 MiB through a 128 KiB pool
	clients, servers := tcpPairs(t, n)
	for i, s := range servers {
		g.add(srcs.ID(i+1), s, time.Millisecond)
	}
	sent := make([][]byte, n)
	var wg sync.WaitGroup
	for i, c := range clients {
		sent[i] = randBytes(rand.New(rand.NewPCG(uint64(i), 9)), size)
		wg.Go(func() {
			c.Write(sent[i])
			c.Close()
		})
	}
	// With nobody releasing, the lanes must stall with the pool dry:
	// everything out is held downstream, and no more than the pool.
	waitFor(t, "the pool to run dry", func() bool { return g.pool.Stats().InUse == buffers })
	quiet := time.NewTimer(50 * time.Millisecond)
	for stalled := false; !stalled; {
		select {
		case <-g.rec.Emitted():
			quiet.Reset(50 * time.Millisecond)
		case <-quiet.C:
			stalled = true
		}
	}
	if held, st := g.rec.Held(), g.pool.Stats(); held > buffers || st.InUse > buffers || held == 0 {
		t.Fatalf("consumer holds %d buffers, pool %+v", held, st)
	}
	select {
	case lr := <-g.rec.Finished():
		t.Fatalf("lane %d finished while the consumer held everything", lr.ID)
	default:
	}
	// Now consume: release whatever is held whenever something arrives.
	done := make(chan struct{})
	var consumer sync.WaitGroup
	consumer.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if held := g.rec.Held(); held > buffers {
				t.Errorf("consumer holds %d buffers of %d", held, buffers)
			}
			g.rec.ReleaseAll()
			select {
			case <-done:
				return
			case <-g.rec.Emitted():
			case <-tick.C:
			}
		}
	})
	got, err := g.rec.WaitFinished(n, 30*time.Second)
	close(done)
	consumer.Wait()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if lr := got[srcs.ID(i+1)]; lr.Err != io.EOF || lr.Bytes != size || lr.CRC != crc(sent[i]) {
			t.Errorf("lane %d: Finish(%v) after %d bytes crc %08x; want io.EOF after %d crc %08x",
				i+1, lr.Err, lr.Bytes, lr.CRC, size, crc(sent[i]))
		}
	}
}

func TestRunnerIdleLanesHoldNoBuffers(t *testing.T) {
	const n = 500
	g := newRig(t, 2, pool.Config{BufSize: 4 << 10, Buffers: 64}, runnerOptions{})
	clients, servers := tcpPairs(t, n)
	lanes := make([]*srcs.Lane, n)
	for i, s := range servers {
		lanes[i] = g.add(srcs.ID(i+1), s, 0)
	}
	g.run.sync() // every lane is added and its poll submitted
	if st := g.pool.Stats(); st.InUse != 0 {
		t.Fatalf("%d silent lanes hold %d buffers", n, st.InUse)
	}
	if st := g.run.Stats(); st.Lanes != n {
		t.Fatalf("Stats().Lanes = %d, want %d", st.Lanes, n)
	}
	// Removing a lane whose poll is armed must cancel the poll.
	const removed = 100
	for _, l := range lanes[:removed] {
		g.run.Remove(l)
	}
	got, err := g.rec.WaitFinished(removed, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 0 {
			t.Errorf("idle lane %d removed: Finish(%v) after %d bytes", id, lr.Err, lr.Bytes)
		}
	}
	clients = clients[removed:]
	// Exactly one buffer each: the lane fills it, emits it, takes the next
	// one for a receive that finds the socket empty, and must give it back.
	full := make([]byte, g.pool.BufSize())
	for _, c := range clients {
		c.Write(full)
	}
	for i := removed; i < n; i++ {
		g.waitBytes(srcs.ID(i+1), int64(len(full)))
	}
	// Lanes that queued for a buffer behind the others get it, find the
	// socket empty and give it back one grant at a time, so this settles
	// over a few loop turns.
	waitFor(t, "drained lanes to give back every buffer", func() bool { return g.pool.Stats().InUse == 0 })
	for _, c := range clients {
		c.Close()
	}
	got, err = g.rec.WaitFinished(n-removed, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if lr.Err != io.EOF || lr.Bytes != int64(len(full)) {
			t.Errorf("lane %d: Finish(%v) after %d bytes", id, lr.Err, lr.Bytes)
		}
	}
}

func TestRunnerPauseAndRemove(t *testing.T) {
	g := newRig(t, 2, pool.Config{BufSize: 16 << 10, Buffers: 32}, runnerOptions{})
	g.rec.Keep = true
	const n = 4
	clients, servers := tcpPairs(t, n)
	lanes := make([]*srcs.Lane, n)
	for i, s := range servers {
		lanes[i] = g.add(srcs.ID(i+1), s, time.Hour)
	}
	// 1000 bytes each, held as partial data by the hour-long flush timeout.
	rnd := rand.New(rand.NewPCG(5, 6))
	sent := make([][]byte, n)
	for i, c := range clients {
		sent[i] = randBytes(rnd, 1000)
		c.Write(sent[i])
	}
	waitFor(t, "every lane to read", func() bool { return g.pool.Stats().InUse == n })

	g.run.SetPaused(true)
	g.run.sync()
	g.run.sync() // reads issued before the pause are reaped
	reads := g.run.Stats().Reads
	for i, c := range clients {
		more := randBytes(rnd, 3000)
		sent[i] = append(sent[i], more...)
		c.Write(more)
	}
	time.Sleep(30 * time.Millisecond) // time for reads that must not happen
	g.run.sync()
	if got := g.run.Stats().Reads; got != reads {
		t.Errorf("paused runner read %d times", got-reads)
	}

	// Removing while paused: partial data first, then ErrStopped.
	g.run.Remove(lanes[0])
	g.run.Remove(lanes[1])
	g.run.Remove(lanes[1]) // idempotent
	got, err := g.rec.WaitFinished(2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		lr := got[srcs.ID(i+1)]
		if !errors.Is(lr.Err, srcs.ErrStopped) {
			t.Errorf("lane %d: Finish(%v), want srcs.ErrStopped", i+1, lr.Err)
		}
		if data := g.rec.Lane(srcs.ID(i + 1)).Data; !bytes.Equal(data, sent[i][:1000]) || lr.Partials != 1 {
			t.Errorf("lane %d: emitted %d bytes in %d partial chunks, want the 1000 read before the pause in one", i+1, len(data), lr.Partials)
		}
	}
	g.run.Remove(lanes[0]) // after Finish: a no-op

	g.run.SetPaused(false)
	for i := 2; i < n; i++ {
		clients[i].Close()
	}
	got, err = g.rec.WaitFinished(n-2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i < n; i++ {
		lr := got[srcs.ID(i+1)]
		if data := g.rec.Lane(srcs.ID(i + 1)).Data; lr.Err != io.EOF || !bytes.Equal(data, sent[i]) {
			t.Errorf("lane %d: Finish(%v) after %d of %d bytes", i+1, lr.Err, len(data), len(sent[i]))
		}
	}
}

func TestRunnerCloseWithTraffic(t *testing.T) {
	p, err := pool.New(pool.Config{BufSize: 16 << 10, Buffers: 64})
	if err != nil {
		t.Fatal(err)
	}
	requireURing(t)
	rec := srcstest.NewRecorder()
	r, err := NewRunner(srcs.RunnerConfig{Workers: 2, Pool: p, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	clients, servers := tcpPairs(t, n)
	for i, s := range servers {
		l := &srcs.Lane{ID: srcs.ID(i + 1), Src: s, Account: p.Join(srcs.ID(i + 1)), Flush: time.Millisecond, Out: rec}
		if err := r.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	var writers sync.WaitGroup
	for _, c := range clients {
		writers.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		})
	}
	for range 20 {
		<-rec.Emitted()
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// Close waits for the workers, which finish every lane first.
	if len(rec.Finished()) != n {
		t.Errorf("%d of %d lanes finished when Close returned", len(rec.Finished()), n)
	}
	got, err := rec.WaitFinished(n, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if !errors.Is(lr.Err, srcs.ErrStopped) {
			t.Errorf("lane %d: Finish(%v), want srcs.ErrStopped", id, lr.Err)
		}
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	l := &srcs.Lane{ID: 999, Src: servers[0], Account: p.Join(999), Out: rec}
	if err := r.Add(l); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Add after Close: %v, want net.ErrClosed", err)
	}
	if st := r.Stats(); st.Lanes != 0 || st.Threads != 0 {
		t.Errorf("Stats() after Close = %+v", st)
	}
	for _, s := range servers {
		s.Close()
	}
	for _, c := range clients {
		c.Close()
	}
	writers.Wait()
	if err := rec.Err(); err != nil {
		t.Error(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("pool.Close: %v", err)
	}
}

// fileSrc is a File-kind source over an open file.
type fileSrc struct {
	f   *os.File
	off int64
}

func (s *fileSrc) Name() string               { return s.f.Name() }
func (s *fileSrc) Open(context.Context) error { return nil }
func (s *fileSrc) Read(p []byte) (int, error) { return s.f.Read(p) }
func (s *fileSrc) Close() error               { return s.f.Close() }
func (s *fileSrc) Desc() (srcs.Desc, error) {
	return srcs.Desc{FD: int(s.f.Fd()), Kind: srcs.File, Offset: s.off}, nil
}

// fdSrc is a source over a raw descriptor of the given kind.
type fdSrc struct {
	fd   int
	kind srcs.Kind
	once sync.Once
}

func (s *fdSrc) Name() string               { return "fd" }
func (s *fdSrc) Open(context.Context) error { return nil }
func (s *fdSrc) Read(p []byte) (int, error) { return unix.Read(s.fd, p) }
func (s *fdSrc) Close() error {
	s.once.Do(func() { unix.Close(s.fd) })
	return nil
}
func (s *fdSrc) Desc() (srcs.Desc, error) { return srcs.Desc{FD: s.fd, Kind: s.kind}, nil }

func TestRunnerFile(t *testing.T) {
	const size = 32 << 20
	path := filepath.Join(t.TempDir(), "data")
	data := randBytes(rand.New(rand.NewPCG(11, 12)), size)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	memlock := func(*Ring, []unix.Iovec) error {
		return &MemlockError{Op: "register buffers", Bytes: 1 << 20, Limit: 8 << 20, Err: unix.ENOMEM}
	}
	for _, tc := range []struct {
		name     string
		register func(*Ring, []unix.Iovec) error
		off      int64
		fixed    bool
	}{
		{name: "fixed", fixed: true},
		{name: "fixed-offset", off: 123457, fixed: true},
		{name: "memlock-read", register: memlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, 2, pool.Config{BufSize: 64 << 10, Buffers: 16}, runnerOptions{register: tc.register})
			for _, w := range g.run.workers {
				if w.fixed != tc.fixed {
					t.Errorf("worker %d: fixed buffers %v, want %v", w.id, w.fixed, tc.fixed)
				}
			}
			if logged := strings.Contains(g.log.String(), "fixed buffers unavailable"); logged == tc.fixed {
				t.Errorf("log %q: want the READ fallback logged: %v", g.log.String(), !tc.fixed)
			} else if n := strings.Count(g.log.String(), "fixed buffers unavailable"); n > 1 {
				t.Errorf("fallback logged %d times", n)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			g.add(1, &fileSrc{f: f, off: tc.off}, time.Hour)
			got, err := g.rec.WaitFinished(1, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			want := data[tc.off:]
			if lr := got[1]; lr.Err != io.EOF || lr.Bytes != int64(len(want)) || lr.CRC != crc(want) {
				t.Errorf("Finish(%v) after %d bytes crc %08x; want io.EOF after %d crc %08x", lr.Err, lr.Bytes, lr.CRC, len(want), crc(want))
			}
		})
	}
}

// TestRunnerGrantNotHeldByBatchWait: a lane that waits for a pool buffer
// must get it as soon as processing releases one, not when a batched wait
// ends. The file lane may hold two buffers, which processing releases from
// another goroutine; with grants held back by a one-second batch wait the
// 64 chunks would take half a minute.
func TestRunnerGrantNotHeldByBatchWait(t *testing.T) {
	const size = 4 << 20
	path := filepath.Join(t.TempDir(), "data")
	data := randBytes(rand.New(rand.NewPCG(13, 14)), size)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	g := newRigConfig(t, srcs.RunnerConfig{Workers: 1, BatchWait: time.Second},
		pool.Config{BufSize: 64 << 10, Buffers: 4, MaxPerSource: 2}, runnerOptions{})
	g.rec.Hold = true
	stop := make(chan struct{})
	released := make(chan struct{})
	go func() {
		defer close(released)
		for {
			select {
			case <-stop:
				return
			case <-g.rec.Emitted():
				g.rec.ReleaseAll()
			}
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	g.add(1, &fileSrc{f: f}, time.Hour)
	got, err := g.rec.WaitFinished(1, 10*time.Second)
	close(stop)
	<-released
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[1]; lr.Err != io.EOF || lr.Bytes != size || lr.CRC != crc(data) {
		t.Errorf("Finish(%v) after %d bytes crc %08x; want io.EOF after %d crc %08x", lr.Err, lr.Bytes, lr.CRC, size, crc(data))
	}
}

func TestRunnerPipe(t *testing.T) {
	// A non-socket stream: polled, then read with RWF_NOWAIT.
	g := newRig(t, 1, pool.Config{BufSize: 4 << 10, Buffers: 8}, runnerOptions{})
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	g.add(1, &fdSrc{fd: fds[0], kind: srcs.Stream}, time.Millisecond)
	w := os.NewFile(uintptr(fds[1]), "pipe")
	data := randBytes(rand.New(rand.NewPCG(13, 14)), 100<<10)
	go func() {
		w.Write(data)
		w.Close()
	}()
	got, err := g.rec.WaitFinished(1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[1]; lr.Err != io.EOF || lr.Bytes != int64(len(data)) || lr.CRC != crc(data) {
		t.Errorf("Finish(%v) after %d bytes; want io.EOF after %d", lr.Err, lr.Bytes, len(data))
	}
}

func TestRunnerAddErrors(t *testing.T) {
	g := newRig(t, 1, pool.Config{BufSize: 4 << 10, Buffers: 4}, runnerOptions{})
	// A Datagram kind on a stream socket.
	dgram, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dgram[1])
	dsrc := &fdSrc{fd: dgram[0], kind: srcs.Datagram}
	defer dsrc.Close()
	for _, tc := range []struct {
		name string
		lane *srcs.Lane
		want error
	}{
		{"datagram on a stream socket", &srcs.Lane{ID: 1, Src: dsrc, Account: g.pool.Join(1), Out: g.rec}, unix.EPROTOTYPE},
		{"no descriptor", &srcs.Lane{ID: 2, Src: plainSrc{}, Account: g.pool.Join(2), Out: g.rec}, srcs.ErrNoDescriptor},
		{"nil lane", nil, nil},
		{"negative flush", &srcs.Lane{ID: 3, Src: dsrc, Account: g.pool.Join(3), Out: g.rec, Flush: -1}, nil},
	} {
		err := g.run.Add(tc.lane)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: Add = %v, want %v", tc.name, err, tc.want)
		}
	}
	if st := g.run.Stats(); st.Lanes != 0 {
		t.Errorf("Stats().Lanes = %d after failed adds", st.Lanes)
	}
}

// plainSrc is a source without a descriptor.
type plainSrc struct{}

func (plainSrc) Name() string               { return "plain" }
func (plainSrc) Open(context.Context) error { return nil }
func (plainSrc) Read(p []byte) (int, error) { return 0, io.EOF }
func (plainSrc) Close() error               { return nil }

func TestRunnerSupported(t *testing.T) {
	ok := Probe()
	requireURing(t)
	noCancel := ok
	noCancel.CancelFd = false
	noExtArg := ok
	noExtArg.Features &^= FeatExtArg
	noRecv := ok
	noRecv.ops[OpRecv/64] &^= 1 << (OpRecv % 64)
	for _, tc := range []struct {
		name string
		p    ProbeResult
		want string
	}{
		{"disabled", ProbeResult{Reason: "setup: io_uring is disabled by sysctl", Err: &NotSupportedError{Op: "setup", Reason: "io_uring is disabled by sysctl kernel.io_uring_disabled=2"}}, "disabled"},
		{"setup failed", ProbeResult{Reason: "setup: cannot allocate memory", Err: unix.ENOMEM}, "unusable"},
		{"no cancel by fd", noCancel, "cancel by descriptor"},
		{"no timed waits", noExtArg, "EXT_ARG"},
		{"no recv", noRecv, "RECV"},
	} {
		err := runnerSupported(tc.p)
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ring: runner: ") {
			t.Errorf("%s: %v, want ErrNotSupported saying %q", tc.name, err, tc.want)
		}
	}
	if err := runnerSupported(ok); err != nil {
		t.Errorf("supported kernel: %v", err)
	}
}

func TestRunnerConfigErrors(t *testing.T) {
	requireURing(t)
	if _, err := NewRunner(srcs.RunnerConfig{Workers: 1, BatchWait: time.Second}); err == nil {
		t.Error("NewRunner without a pool succeeded")
	}
	p, err := pool.New(pool.Config{BufSize: 4 << 10, Buffers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := NewRunner(srcs.RunnerConfig{Workers: -1, Pool: p}); err == nil {
		t.Error("NewRunner with -1 workers succeeded")
	}
}

func TestRunnerSteadyStateAllocs(t *testing.T) {
	requireURing(t)
	p, err := pool.New(pool.Config{BufSize: 64 << 10, Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(srcs.RunnerConfig{Workers: 1, Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := &fdSrc{fd: fds[0], kind: srcs.Stream}
	em := &countEmitter{finished: make(chan error, 1)}
	// A flush timeout, so the flush heap is in play too.
	l := &srcs.Lane{ID: 1, Src: src, Account: p.Join(1), Flush: time.Millisecond, Out: em}
	if err := r.Add(l); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 48<<10) // not a divisor of the buffer size
	write := func() {
		for range 32 {
			// A signal (Go's preemption) can cut a blocking write short.
			for rest := buf; len(rest) > 0; {
				n, err := unix.Write(fds[1], rest)
				if err != nil && err != unix.EINTR {
					t.Fatal(err)
				}
				rest = rest[max(n, 0):]
			}
		}
	}
	write() // grow the worker's slices
	allocs := testing.AllocsPerRun(20, write)
	unix.Close(fds[1])
	if err := <-em.finished; err != io.EOF {
		t.Errorf("Finish(%v)", err)
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	src.Close()
	if err := p.Close(); err != nil {
		t.Error(err)
	}
	// Our warm-up, AllocsPerRun's own, and 20 runs.
	if want := int64(22 * 32 * len(buf)); em.bytes.Load() != want {
		t.Errorf("%d bytes emitted, want %d", em.bytes.Load(), want)
	}
	// Each run moves 1.5 MiB through some 24 buffers and ~50 reads.
	if allocs > 1 {
		t.Errorf("%.1f allocations per 1.5 MiB in steady state, want 0", allocs)
	}
}
