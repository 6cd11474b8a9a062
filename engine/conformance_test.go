package engine_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/ring"
	"github.com/sluice-io/sluice/srcs"
)

// The engine's conformance suite. The runner contract (what a runner does
// with a lane: streams, flushes, ends, resets, slow consumers, files,
// datagrams, pause, close) has its own suite, internal/testkit/runnertest, which
// each runner's package runs against its constructor. TestConformance
// covers what the engine adds on top, over every runner: whichever runner
// reads the bytes, the engine delivers a source's bytes once and in order
// as numbered chunks, reports its errors behind its chunks and its end
// last, serves the sources users have (listeners, unix sockets, UDP, MQTT),
// pauses on its queue and shuts down leaving nothing behind. Each case runs
// as TestConformance/<runner>/<case>. The framing suite (TestFramed*, in
// conformance_framed_test.go) does the same for framed sources.
var allRunners = []string{engine.RunnerURing, engine.RunnerEpoll, engine.RunnerGoroutine, engine.RunnerThread}

// conformance is the engine's conformance table: each case runs once per
// runner.
var conformance = []struct {
	name string
	run  func(t *testing.T, runner string)
}{
	{"ThousandSources", thousandSources},
	{"PartialFlush", partialFlush},
	{"ResetInOrder", resetInOrder},
	{"UDP", udp},
	{"UnixSockets", unixSockets},
	{"MQTT", mqttCase},
	{"MQTTMosquittoRestart", mqttMosquittoRestart},
	{"MQTTKeepaliveTimeout", mqttKeepaliveTimeout},
	{"StopWhilePaused", stopWhilePaused},
	{"ShutdownUnderTrafficLeavesNothing", shutdownUnderTraffic},
	{"ProcessingCannotStarveSources", processingCannotStarveSources},
}

// TestConformance runs the conformance table on every runner, as
// TestConformance/<runner>/<case>.
func TestConformance(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		for _, c := range conformance {
			t.Run(c.name, func(t *testing.T) { c.run(t, runner) })
		}
	})
}

func forEachRunner(t *testing.T, f func(t *testing.T, runner string)) {
	for _, r := range allRunners {
		t.Run(r, func(t *testing.T) {
			requireRunner(t, r)
			f(t, r)
		})
	}
}

// requireRunner skips a runner the kernel cannot support, unless
// SLUICE_REQUIRE_URING=1 says io_uring must be there.
func requireRunner(t testing.TB, runner string) {
	t.Helper()
	if runner != engine.RunnerURing {
		return
	}
	p := ring.Probe()
	srcstest.RequireURing(t, p.Supported, p.Reason)
}

// stream is what a collector saw of one source (see streamid_test.go for
// how tests find it).
type stream struct {
	id       srcs.ID
	name     string
	tag      streamTag
	bytes    int64
	crc      uint32
	nextSeq  uint64
	chunks   int
	partials int
	eos      bool
	errs     []error
	// events is the order of kinds seen: 'd' data, 'e' error, 'x' end.
	events []byte
	// firstPartialHold is the first partial chunk's emit minus first byte.
	firstPartialHold time.Duration
}

// collector consumes an engine in pull mode, checks per-source sequence
// numbers, digests bytes, and records errors in delivery order.
type collector struct {
	t *testing.T

	mu      sync.Mutex
	byID    map[srcs.ID]*stream
	streams map[string]*stream // by key, once the stream's tag is known
	bad     []string
	ended   int // streams that delivered their end
	resets  int // errors that were connection resets
	hold    bool
	held    []engine.Chunk
	changed chan struct{}
	pulling chan struct{} // closed while the collector may pull
}

func newCollector(t *testing.T) *collector {
	c := &collector{t: t, byID: map[srcs.ID]*stream{}, streams: map[string]*stream{}, changed: make(chan struct{}, 1),
		pulling: make(chan struct{})}
	close(c.pulling)
	return c
}

// setPulling starts or stops the collector's calls to Next, so that
// undelivered chunks can pile up in the engine's queue.
func (c *collector) setPulling(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.pulling:
		if !on {
			c.pulling = make(chan struct{})
		}
	default:
		if on {
			close(c.pulling)
		}
	}
}

func (c *collector) gate() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pulling
}

// source returns the stream of source id, named name.
func (c *collector) source(id srcs.ID, name string) *stream {
	s := c.byID[id]
	if s == nil {
		s = &stream{id: id, name: name}
		c.byID[id] = s
	}
	return s
}

// feed passes a chunk's data through s's tag, files s under its key once
// the tag is known, and returns the data after the tag. Two sources with
// one tag are an error; of two untagged sources with one name (the
// anonymous connections of a storm test), the later is filed.
func (c *collector) feed(s *stream, data []byte, end bool) []byte {
	known := s.tag.key != ""
	rest := s.tag.feed(data, s.name, end)
	if key := s.tag.key; !known && key != "" {
		if o := c.streams[key]; o != nil && key != s.name {
			c.bad = append(c.bad, fmt.Sprintf("sources %d and %d are both %s", o.id, s.id, key))
		}
		c.streams[key] = s
	}
	return rest
}

func (c *collector) onError(err error) {
	var se *srcs.SourceError
	if !errors.As(err, &se) {
		c.mu.Lock()
		c.bad = append(c.bad, fmt.Sprintf("error without a source: %v", err))
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	s := c.source(se.ID, se.Name)
	s.errs = append(s.errs, err)
	s.events = append(s.events, 'e')
	if errors.Is(err, srcs.ErrReset) {
		c.resets++
	}
	c.mu.Unlock()
	c.signal()
}

func (c *collector) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *collector) consume(ch engine.Chunk) {
	c.mu.Lock()
	s := c.source(ch.Source, ch.Name)
	if ch.Seq != s.nextSeq {
		c.bad = append(c.bad, fmt.Sprintf("source %d (%s): seq %d, want %d", ch.Source, ch.Name, ch.Seq, s.nextSeq))
	}
	s.nextSeq = ch.Seq + 1
	if s.eos {
		c.bad = append(c.bad, fmt.Sprintf("source %d (%s): chunk after end of stream", ch.Source, ch.Name))
	}
	data := c.feed(s, ch.Data, ch.Flags&srcs.EndOfStream != 0)
	switch {
	case ch.Flags&srcs.EndOfStream != 0:
		s.eos = true
		c.ended++
		s.events = append(s.events, 'x')
		if len(ch.Data) != 0 {
			c.bad = append(c.bad, fmt.Sprintf("source %d (%s): end-of-stream chunk with data", ch.Source, ch.Name))
		}
	case len(data) > 0:
		s.bytes += int64(len(data))
		s.crc = crc32.Update(s.crc, srcstest.Castagnoli, data)
		s.chunks++
		if len(s.events) == 0 || s.events[len(s.events)-1] != 'd' {
			s.events = append(s.events, 'd')
		}
		if ch.Flags&srcs.Partial != 0 {
			if s.partials == 0 {
				s.firstPartialHold = ch.Emitted.Sub(ch.FirstByte)
			}
			s.partials++
		}
	}
	hold := c.hold && ch.Flags&srcs.EndOfStream == 0
	if hold {
		c.held = append(c.held, ch)
	}
	c.mu.Unlock()
	if !hold {
		ch.Release()
	}
	c.signal()
}

// run pulls chunks until the engine closes. Run it on its own goroutine.
func (c *collector) run(e *engine.Engine) {
	for {
		<-c.gate()
		ch, err := e.Next(context.Background())
		if err != nil {
			if !errors.Is(err, engine.ErrClosed) {
				c.mu.Lock()
				c.bad = append(c.bad, fmt.Sprintf("Next: %v", err))
				c.mu.Unlock()
			}
			return
		}
		c.consume(ch)
	}
}

// setHold makes the collector keep (true) or release (false) chunks; on
// false it releases everything it kept.
func (c *collector) setHold(h bool) {
	c.mu.Lock()
	c.hold = h
	held := c.held
	if !h {
		c.held = nil
	}
	c.mu.Unlock()
	if !h {
		for i := range held {
			held[i].Release()
		}
	}
}

// waitFor waits until cond holds over the streams (by key), or fails the
// test. cond runs under the collector's lock, so it may read byID too.
func (c *collector) waitFor(what string, timeout time.Duration, cond func(map[string]*stream) bool) {
	c.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond(c.streams)
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.changed:
		case <-deadline.C:
			c.mu.Lock()
			n := len(c.streams)
			c.mu.Unlock()
			c.t.Fatalf("timed out after %v waiting for %s (%d streams seen)", timeout, what, n)
		}
	}
}

// get returns a copy of what the collector saw of the stream filed under
// key (a tag's key, or an untagged source's name): zero if none yet.
func (c *collector) get(key string) stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s stream
	if p := c.streams[key]; p != nil {
		s = *p
	}
	s.events = append([]byte(nil), s.events...)
	s.errs = append([]error(nil), s.errs...)
	return s
}

// endedCount returns how many streams have ended.
func (c *collector) endedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// waitEnd waits for the end of the stream filed under key and returns
// what the collector saw of it.
func (c *collector) waitEnd(key string, timeout time.Duration) stream {
	c.t.Helper()
	c.waitFor(key+"'s end", timeout, func(m map[string]*stream) bool { return m[key] != nil && m[key].eos })
	return c.get(key)
}

func (c *collector) check() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bad {
		c.t.Error(b)
	}
}

// harness is an engine in pull mode with a collector and a TCP listener.
type harness struct {
	t    *testing.T
	e    *engine.Engine
	col  *collector
	addr string
	done chan struct{}
	once sync.Once
}

func newHarness(t *testing.T, runner string, cfg engine.Config) *harness {
	t.Helper()
	return newHarnessMode(t, runner, cfg, false)
}

// newHarnessMode is newHarness whose collector, with inline, is the
// engine's inline handler instead of pulling with Next.
func newHarnessMode(t *testing.T, runner string, cfg engine.Config, inline bool) *harness {
	t.Helper()
	t.Setenv(engine.EnvRunner, "")
	cfg.Runner = runner
	col := newCollector(t)
	opts := []engine.Option{engine.WithErrorHandler(col.onError)}
	if inline {
		opts = append(opts, engine.WithInlineHandler(col.consume))
	}
	e, err := engine.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if e.Runner() != runner {
		t.Fatalf("engine chose %s, want %s", e.Runner(), runner)
	}
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, e: e, col: col, addr: ln.Addr().String(), done: make(chan struct{})}
	if inline {
		close(h.done)
	} else {
		go func() {
			defer close(h.done)
			col.run(e)
		}()
	}
	t.Cleanup(func() { h.shutdown() })
	return h
}

// shutdown stops the engine and requires a clean result: every source
// stopped, every chunk released, the pool unmapped. Cleanup calls it; a
// test may call it earlier.
func (h *harness) shutdown() { h.once.Do(h.stop) }

func (h *harness) stop() {
	h.t.Helper()
	h.col.setHold(false)
	h.col.setPulling(true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.e.Shutdown(ctx); err != nil {
		h.t.Errorf("shutdown: %v", err)
	}
	<-h.done
	h.col.check()
}

// dial connects to the harness and returns the conn, which has sent its
// tag, and the key its stream is filed under.
func (h *harness) dial() (*net.TCPConn, string) {
	h.t.Helper()
	return dialTagged(h.t, h.addr, nil)
}

// sent is what a sender wrote.
type sent struct {
	bytes int64
	crc   uint32
}

// sendRandom writes up to max random bytes in random pieces with random
// pauses, then closes the connection.
func sendRandom(c net.Conn, seed uint64, maxTotal int) (sent, error) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := r.IntN(maxTotal + 1)
	buf := make([]byte, 16<<10)
	var s sent
	for total > 0 {
		n := min(total, 1+r.IntN(len(buf)))
		for i := range buf[:n] {
			buf[i] = byte(r.Uint32())
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return s, err
		}
		s.bytes += int64(n)
		s.crc = crc32.Update(s.crc, srcstest.Castagnoli, buf[:n])
		total -= n
		if r.IntN(4) == 0 {
			time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond)
		}
	}
	return s, c.Close()
}

// runSenders starts n senders against h, waits for them and for every
// stream's end, and checks each stream's bytes against what was sent.
func runSenders(t *testing.T, h *harness, n, maxBytes int) {
	t.Helper()
	var mu sync.Mutex
	want := map[string]sent{}
	var wg sync.WaitGroup
	for i := range n {
		c, name := h.dial()
		wg.Go(func() {
			s, err := sendRandom(c, uint64(i), maxBytes)
			if err != nil {
				t.Errorf("sender %d: %v", i, err)
			}
			mu.Lock()
			want[name] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	h.col.waitFor(fmt.Sprintf("end of %d streams", n), 120*time.Second, func(m map[string]*stream) bool {
		for name := range want {
			if s := m[name]; s == nil || !s.eos {
				return false
			}
		}
		return true
	})
	for name, w := range want {
		got := h.col.get(name)
		if got.bytes != w.bytes || got.crc != w.crc {
			t.Errorf("%s: got %d bytes crc %08x, sent %d bytes crc %08x", name, got.bytes, got.crc, w.bytes, w.crc)
		}
		if len(got.errs) != 0 {
			t.Errorf("%s: unexpected errors %v", name, got.errs)
		}
	}
}

// thousandSources is the end-to-end case: 1,000 sources send random
// streams at once through a listener, and the engine, on this runner,
// delivers every byte of each once and in order, in chunks numbered from
// zero, then its end and no error; and Stats reports the runner's
// counters. The runner's own share (every lane's bytes, how its counters
// add up) is runnertest's Streams/ManyConns.
func thousandSources(t *testing.T, runner string) {
	h := newHarness(t, runner, engine.Config{Workers: 2, BufSize: 16 << 10, Buffers: 256, Flush: 2 * time.Millisecond})
	runSenders(t, h, 1000, 48<<10)
	st := h.e.Stats()
	t.Logf("%s: pool waits %d, pauses %d", runner, st.Pool.Waits, st.Pauses)
	rs := st.Runners[0]
	t.Logf("%s: reads %d, waits %d, enters %d, completions %d, syscalls %d",
		runner, rs.Reads, rs.Waits, rs.Enters, rs.Completions, rs.Syscalls)
	if len(st.Runners) != 1 || rs.Runner != runner || rs.Reads == 0 || rs.Syscalls == 0 {
		t.Errorf("%s: Stats.Runners %+v: want this runner's counters, which carried the traffic", runner, st.Runners)
	}
}

// partialFlush checks the chunk the engine makes of a runner's partial
// flush: a few bytes and then silence come out after the flush timeout,
// the stream still open, and the chunk's FirstByte and Emitted show the
// hold. How long a runner may hold, and when it must emit, is runnertest's
// Flush.
func partialFlush(t *testing.T, runner string) {
	const flush = 30 * time.Millisecond
	h := newHarness(t, runner, engine.Config{Workers: 1, Buffers: 16, Flush: flush})
	c, name := h.dial()
	defer c.Close()
	if _, err := c.Write([]byte("a few bytes, then silence")); err != nil {
		t.Fatal(err)
	}
	h.col.waitFor("the partial flush", 30*time.Second, func(m map[string]*stream) bool {
		s := m[name]
		return s != nil && s.partials > 0
	})
	got := h.col.get(name)
	if got.bytes != 25 || got.eos {
		t.Fatalf("%s: %d bytes, eos %v; want 25 bytes and the stream still open", runner, got.bytes, got.eos)
	}
	// The buffer must have waited for the timeout: a runner that
	// emits at once would show a hold far below it.
	if got.firstPartialHold < flush*2/3 {
		t.Fatalf("%s: partial chunk held %v, want about the flush timeout %v", runner, got.firstPartialHold, flush)
	}
}

// resetInOrder resets a connection while the runner holds its bytes in a
// half-filled buffer, with the consumer not pulling: the engine queues the
// data, the reset (a srcs.SourceError wrapping srcs.ErrReset) and the end,
// and hands them out in that order once the consumer pulls again. That
// the runner emits the held bytes before it reports the reset is
// runnertest's Reset/MidBuffer.
func resetInOrder(t *testing.T, runner string) {
	// A long flush keeps the bytes in a half-filled buffer when the
	// reset arrives.
	h := newHarness(t, runner, engine.Config{Workers: 1, Buffers: 16, Flush: time.Hour})
	c, name := h.dial()
	msg := []byte("bytes that must survive the reset")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	// Wait until the runner has the bytes in a buffer: the source
	// holds one.
	waitSource(t, h.e, "tcp://"+c.LocalAddr().String(), func(s engine.SourceStats) bool { return s.Held > 0 })
	h.col.setPulling(false)
	if err := srcstest.Reset(c); err != nil {
		t.Fatal(err)
	}
	// The engine counts the reset as it queues it, behind the data.
	waitUntil(t, "the reset to be queued", func() bool { return h.e.Totals().Errors[engine.ErrorReset] == 1 })
	h.col.setPulling(true)
	h.col.waitFor("end after the reset", 30*time.Second, func(m map[string]*stream) bool {
		s := m[name]
		return s != nil && s.eos
	})
	got := h.col.get(name)
	if got.bytes != int64(len(msg)) || got.crc != crc32.Checksum(msg, srcstest.Castagnoli) {
		t.Fatalf("%s: %d bytes delivered, want the %d sent before the reset", runner, got.bytes, len(msg))
	}
	if string(got.events) != "dex" || len(got.errs) != 1 || !errors.Is(got.errs[0], srcs.ErrReset) {
		t.Fatalf("%s: events %q errs %v; want data, then a reset error, then the end", runner, got.events, got.errs)
	}
}

// waitSource waits until the stats of the live source named name satisfy
// cond. The name must be unique among the engine's sources: use it only
// for a connection that is open while no other of the test has closed.
func waitSource(t *testing.T, e *engine.Engine, name string, cond func(engine.SourceStats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range e.Stats().Sources {
			if s.Name == name && cond(s) {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("source %s never reached the expected state", name)
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// pullUntilShutdown pulls e's chunks into f on a goroutine of its own
// (pullAll) and returns the function that shuts e down, requiring a clean
// result, and waits for the puller: defer pullUntilShutdown(t, e, f)().
func pullUntilShutdown(t *testing.T, e *engine.Engine, f func(engine.Chunk)) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pullAll(e, f)
	}()
	return func() {
		if err := e.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		<-done
	}
}

// pullAll pulls chunks until the engine closes, handing each to f and
// releasing it.
func pullAll(e *engine.Engine, f func(engine.Chunk)) {
	for {
		c, err := e.Next(context.Background())
		if err != nil {
			return
		}
		f(c)
		c.Release()
	}
}
