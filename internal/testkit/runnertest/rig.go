package runnertest

import (
	"errors"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// The rig's patience: how long WaitUntil waits for a condition, and Finish
// and Finished for lanes to end. Generous, for loaded machines; a passing
// test never waits them out.
const (
	waitTimeout   = 10 * time.Second
	finishTimeout = 30 * time.Second
)

// RigConfig says how to build a Rig.
type RigConfig struct {
	// Pool is the rig's pool; a zero BufSize means 4 KiB.
	Pool pool.Config
	// Runner is handed to the runner's constructor with the rig's Pool and
	// Logger filled in.
	Runner contract.RunnerConfig
	// Source makes the source of an accepted connection (Conn); nil means
	// srcs.NewConn.
	Source func(c net.Conn) srcs.Source
	// Datagrams makes the lanes' emitter a srcstest.DatagramRecorder, which
	// checks the framing of datagram chunks on top of the Recorder's
	// checks (Rec is its Recorder).
	Datagrams bool
}

// Rig is one runner under test with its own pool, a srcstest.Recorder as
// every lane's emitter, a loopback TCP listener to connect lanes through,
// and the runner's log. Its cleanup does what the engine does at the end:
// it closes the runner, then the lanes' sources, releases what the
// recorder holds, checks the recorder's contract and closes the pool,
// which fails while any buffer is out.
//
// A Rig is used from its test's goroutine, except Add, Lane and the
// recorder, which are safe for concurrent use.
type Rig struct {
	Pool *pool.Pool
	Rec  *srcstest.Recorder
	// Dgrams is the lanes' emitter with RigConfig.Datagrams, else nil.
	Dgrams *srcstest.DatagramRecorder
	R      Runner
	// CloseErr, when set, is what the runner's Close must report (a worker
	// failure). Leaked is how many buffers stay out for good (given up to
	// reads the kernel may still complete): the pool must show them in use
	// and is not closed.
	CloseErr error
	Leaked   int

	t      *testing.T
	out    contract.Emitter
	check  func() error // the emitter's contract
	source func(c net.Conn) srcs.Source
	ln     net.Listener
	log    *os.File // what the runner logs; a file, so a test may read it while the runner writes

	mu     sync.Mutex
	lanes  []*contract.Lane
	nextID srcs.ID
	closed bool
}

// NewRig builds a pool and a runner as cfg says and registers the cleanup.
// It skips the test when newRunner says the runner is unsupported here
// (errors.ErrUnsupported).
func NewRig(t *testing.T, newRunner New, cfg RigConfig) *Rig {
	t.Helper()
	if cfg.Pool.BufSize == 0 {
		cfg.Pool.BufSize = 4 << 10
	}
	p, err := pool.New(cfg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	g := &Rig{Pool: p, Rec: srcstest.NewRecorder(), t: t, source: cfg.Source}
	g.out, g.check = g.Rec, g.Rec.Err
	if cfg.Datagrams {
		g.Dgrams = srcstest.NewDatagramRecorder()
		g.Rec, g.out, g.check = g.Dgrams.Recorder, g.Dgrams, g.Dgrams.Err
	}
	if g.source == nil {
		g.source = func(c net.Conn) srcs.Source { return srcs.NewConn(c) }
	}
	cfg.Runner.Pool = p
	if g.log, err = os.Create(filepath.Join(t.TempDir(), "runner.log")); err != nil {
		p.Close()
		t.Fatal(err)
	}
	cfg.Runner.Logger = slog.New(slog.NewTextHandler(g.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g.R, err = newRunner(cfg.Runner)
	if err != nil {
		p.Close()
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if g.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		g.R.Close()
		p.Close()
		t.Fatal(err)
	}
	t.Cleanup(g.Shutdown)
	return g
}

// Logged returns what the runner has logged so far.
func (g *Rig) Logged() string {
	b, err := os.ReadFile(g.log.Name())
	if err != nil {
		g.t.Fatal(err)
	}
	return string(b)
}

// Dial connects a client to the rig's listener and returns it with the
// accepted side. Dial returns once the handshake is done, so the one
// connection in the accept queue is this client's. The test's cleanup
// closes the client.
func (g *Rig) Dial() (client, server *net.TCPConn) {
	g.t.Helper()
	c, err := net.Dial("tcp", g.ln.Addr().String())
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { c.Close() })
	s, err := g.ln.Accept()
	if err != nil {
		g.t.Fatal(err)
	}
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// Conn connects a client to a new lane, added with the given flush
// timeout, whose source is the accepted side.
func (g *Rig) Conn(flush time.Duration) (*net.TCPConn, *contract.Lane) {
	g.t.Helper()
	client, server := g.Dial()
	return client, g.Add(g.source(server), flush)
}

// Add makes a lane for src and adds it to the runner, failing the test
// if the runner refuses it.
func (g *Rig) Add(src srcs.Source, flush time.Duration) *contract.Lane {
	g.t.Helper()
	l := g.Lane(src, flush)
	if err := g.R.Add(l); err != nil {
		g.t.Fatalf("add lane %d: %v", l.ID, err)
	}
	return l
}

// Lane makes a lane for src, with the next id, without adding it. The
// rig's cleanup closes src and leaves the lane's account.
func (g *Rig) Lane(src srcs.Source, flush time.Duration) *contract.Lane {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextID++
	l := &contract.Lane{ID: g.nextID, Src: src, Account: g.Pool.Join(g.nextID), Flush: flush, Out: g.out}
	g.lanes = append(g.lanes, l)
	return l
}

// Lanes returns the lanes made so far.
func (g *Rig) Lanes() []*contract.Lane {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*contract.Lane(nil), g.lanes...)
}

// WaitUntil re-checks cond on every emit, and every few milliseconds for
// state that emits do not signal, and fails the test if it does not hold
// in time.
func (g *Rig) WaitUntil(what string, cond func() bool) {
	g.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-g.Rec.Emitted():
		case <-tick.C:
		case <-deadline.C:
			g.t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
	}
}

// Finished waits for n lanes to finish and returns them by id.
func (g *Rig) Finished(n int) map[srcs.ID]*srcstest.LaneRecord {
	g.t.Helper()
	got, err := g.Rec.WaitFinished(n, finishTimeout)
	if err != nil {
		g.t.Fatalf("%v (pool %+v, runner %+v)", err, g.Pool.Stats(), g.R.Stats())
	}
	return got
}

// Finish waits for l to finish, which must be the next lane to.
func (g *Rig) Finish(l *contract.Lane) *srcstest.LaneRecord {
	g.t.Helper()
	got := g.Finished(1)
	lr := got[l.ID]
	if lr == nil {
		g.t.Fatalf("lane %d: another lane finished: %v", l.ID, got)
	}
	return lr
}

// Shutdown closes the runner, the sources and the pool, checking each
// step, once; the rig's cleanup calls it.
func (g *Rig) Shutdown() {
	g.mu.Lock()
	done := g.closed
	g.closed = true
	lanes := g.lanes
	g.mu.Unlock()
	if done {
		return
	}
	t := g.t
	if err := g.R.Close(); (err != nil || g.CloseErr != nil) && !errors.Is(err, g.CloseErr) {
		t.Errorf("runner close: %v, want %v", err, g.CloseErr)
	}
	if st := g.R.Stats(); st.Lanes != 0 || st.Threads != 0 {
		t.Errorf("after Close: %d lanes still driven, %d threads", st.Lanes, st.Threads)
	}
	for _, l := range lanes {
		l.Src.Close()
		l.Account.Leave()
	}
	g.ln.Close()
	g.log.Close()
	g.Rec.ReleaseAll()
	if err := g.check(); err != nil {
		t.Error(err)
	}
	if g.Leaked > 0 {
		if st := g.Pool.Stats(); st.InUse != g.Leaked {
			t.Errorf("pool: %d buffers in use after Close, want the %d leaked", st.InUse, g.Leaked)
		}
		return
	}
	if err := g.Pool.Close(); err != nil {
		t.Errorf("pool close: %v (%+v)", err, g.Pool.Stats())
	}
}

// RandomBytes returns n bytes that depend only on seed.
func RandomBytes(seed uint64, n int) []byte {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, n)
	rand.NewChaCha8(s).Read(b)
	return b
}

// CRC is the CRC-32C digest the Recorder keeps of a lane's bytes.
func CRC(b []byte) uint32 { return crc32.Checksum(b, srcstest.Castagnoli) }

// send writes data to c in random pieces of at most maxPiece bytes, with a
// random pause up to maxPause after about one piece in four, then closes c.
func send(c net.Conn, seed uint64, data []byte, maxPiece int, maxPause time.Duration) error {
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
