package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// source is the engine's side of one source: its lifecycle, its lane, its
// counters, and the contract.Emitter its runner reports to. An engine keeps
// one per connection, most of them idle, so a source holds here only what
// every source uses; what only some use waits behind a pointer: watched
// for the sources that observe their own delivery, cold (made on first
// use) for errors, back-off and the Open in progress.
type source struct {
	e    *Engine
	lane contract.Lane // its ID and Src are the source's id and source
	name string        // lane.Src.Name(), for every chunk

	mu    sync.Mutex // serialises lifecycle events
	lc    lifecycle
	state atomic.Uint32 // mirrors lc.state for Stats

	seq   atomic.Uint64 // data chunks emitted: the next one's Seq
	bytes atomic.Uint64

	cold atomic.Pointer[sourceCold] // see coldPart
}

// watched is what a source that observes its own delivery needs on the
// emit path. Only the emit path touches dseq and end.
type watched struct {
	rel *releases          // nil unless the source is a srcs.ReleaseObserver
	obs srcs.ChunkObserver // nil unless the source is one
	// dseq and end number the data chunks and track the stream offset
	// for rel.
	dseq uint64
	end  int64
}

// sourceCold is the part of a source that most sources never touch, and
// an idle one never: error and partial-chunk counters, the state of the
// sources that observe their own delivery, a Reconnector's back-off, and
// the Open or back-off wait in progress.
type sourceCold struct {
	// w is set when the source is made, for a srcs.ReleaseObserver or a
	// srcs.ChunkObserver, and read on the emit path.
	w *watched

	partials atomic.Uint64 // chunks emitted partly filled; the first makes the cold part
	errs     atomic.Uint64
	dropped  atomic.Uint64 // datagrams too large for a buffer
	skipped  atomic.Uint64 // records too long, skipped
	lastErr  atomic.Pointer[error]

	backoff srcs.Backoff // a Reconnector's, set before the source starts
	// outage is when the first of the failures in a row happened, for a
	// Reconnector's reports (see reportFailure), and unreachable says an
	// open failed among them; guarded by the source's mu.
	outage      time.Time
	unreachable bool

	// sessionEnds is WithSessionEnds, set before the source starts;
	// sessions counts the session-end chunks it delivered, which take
	// Seq numbers but are not data chunks.
	sessionEnds bool
	sessions    atomic.Uint64

	// limited is WithRateLimit: every byte delivered is charged to the
	// source's account. idle is WithIdleTimeout's watch. Both are set
	// before the source starts.
	limited bool
	idle    *idleWatch
	// user is WithSourceState's value for the source (Chunk.State).
	user any

	// The Open or backoff wait in progress runs under a context of its
	// own, made only for it (most sources never wait, and thousands of
	// idle ones should not each keep a context): stop or the source's end
	// cancels it, and one begun after that starts cancelled. The
	// lifecycle runs one such operation at a time, and each ends before
	// it hands over to the next. Guarded by opMu, never held across a
	// call out.
	opMu     sync.Mutex
	opCancel context.CancelFunc
	ended    bool // stop was asked, or the source ended
}

// coldPart returns the source's cold part, making it on first use. Any
// goroutine.
func (s *source) coldPart() *sourceCold {
	if c := s.cold.Load(); c != nil {
		return c
	}
	c := new(sourceCold)
	if s.cold.CompareAndSwap(nil, c) {
		return c
	}
	return s.cold.Load()
}

// watch returns the state of a source that observes its own delivery,
// or nil.
func (s *source) watch() *watched {
	if c := s.cold.Load(); c != nil {
		return c.w
	}
	return nil
}

// id returns the source's id.
func (s *source) id() srcs.ID { return s.lane.ID }

// src returns the source.
func (s *source) src() srcs.Source { return s.lane.Src }

// runner returns the runner that reads the source, as runnerForLocked
// chose it. A source for the side runner was made after e.side was set,
// which never changes again; one for e.runner never reads e.side.
func (s *source) runner() contract.Runner {
	if rawReadable(s.src()) || s.e.runner.Name() == RunnerGoroutine {
		return s.e.runner
	}
	return s.e.side
}

var (
	_ contract.DatagramDropReporter = (*source)(nil)
	_ contract.RecordReporter       = (*source)(nil)
	_ contract.SkipCounter          = (*source)(nil)
	_ contract.BytesEmitter         = (*source)(nil)
)

// BytesSkipped implements contract.SkipCounter: bytes of a skipped record
// count in the stream offsets the source's observers see, so that a
// checkpoint taken from Released lands where the delivered bytes end in
// the source, not short of them. It runs on the emit path, like Emit.
func (s *source) BytesSkipped(_ *contract.Lane, n int) {
	w := s.watch()
	if w == nil {
		return
	}
	if w.rel != nil {
		w.end += int64(n)
	}
	if w.obs != nil {
		w.obs.Skipped(int64(n))
	}
}

// RecordSkipped implements contract.RecordReporter: a record too long for its
// framer or a buffer was skipped. Every one is counted; the first of the
// source's life is logged and handed to the error handler, in order behind
// the data read before it, and the rest only counted, so a stream of bad
// records cannot flood the log.
func (s *source) RecordSkipped(_ *contract.Lane, err error) {
	s.e.totals.skipped.Add(1)
	if s.coldPart().skipped.Add(1) > 1 {
		return
	}
	s.e.log.Warn("skipped a record too long to deliver (further ones from this source are only counted)",
		"source", s.id(), "name", s.name, "err", err)
	s.report("read", err)
}

// DatagramDropped implements contract.DatagramDropReporter: the drop is counted
// and reported, in order behind the datagrams read before it.
func (s *source) DatagramDropped(_ *contract.Lane, size int) {
	s.coldPart().dropped.Add(1)
	s.report("read", fmt.Errorf("%w: dropped a datagram of %d bytes or more", srcs.ErrDatagramTooLarge, size))
}

// Emit implements contract.Emitter: it turns a filled buffer into a chunk and
// queues it on the source's shard. It never blocks.
func (s *source) Emit(_ *contract.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	s.emit(b, b.Bytes()[:n], flags, first)
}

// EmitBytes implements contract.BytesEmitter: data, held outside the pool,
// becomes a chunk like any other, whose Release frees no buffer.
func (s *source) EmitBytes(_ *contract.Lane, data []byte, flags srcs.Flags, first time.Time) {
	s.emit(nil, data, flags, first)
}

// emit queues a data chunk: b's bytes, or with b nil, bytes on the heap.
func (s *source) emit(b *pool.Buf, data []byte, flags srcs.Flags, first time.Time) {
	n := len(data)
	s.bytes.Add(uint64(n))
	if c := s.cold.Load(); c != nil {
		if c.limited {
			s.lane.Account.Charge(n)
		}
		if c.idle != nil {
			c.idle.last.Store(int64(time.Since(c.idle.start)))
		}
	}
	if flags&srcs.Partial != 0 {
		s.coldPart().partials.Add(1)
	}
	s.e.totals.emitted(n, flags)
	w := s.watch()
	if w != nil && w.obs != nil {
		w.obs.Delivered(data, flags)
	}
	c := Chunk{
		src: s, Source: s.lane.ID, Name: s.name, Seq: s.seq.Add(1) - 1, Flags: flags,
		Data: data, FirstByte: first, Emitted: time.Now(), buf: b, heap: b == nil,
	}
	if b != nil {
		c.lease = b.Lease()
	}
	if w != nil && w.rel != nil {
		w.end += int64(n)
		c.rel, c.dseq, c.end = w.rel, w.dseq, w.end
		w.dseq++
	}
	s.e.deliver(s, item{chunk: c})
}

// Finish implements contract.Emitter. The runner may call it from its worker,
// so the lifecycle step runs on a goroutine of the engine's own.
func (s *source) Finish(_ *contract.Lane, err error) {
	if re := (*srcs.RecordError)(nil); errors.As(err, &re) {
		// A record too long to deliver that ends the lane (a length
		// prefix, an MQTT packet) is a skipped record like those the
		// runner skips and reads on after: counted before the lifecycle
		// reports it, so the end-of-stream chunk's Final counts it.
		s.e.totals.skipped.Add(1)
		s.coldPart().skipped.Add(1)
	}
	s.e.spawn(func() { s.handle(evFinished, err) })
}

// handle feeds one event to the lifecycle and carries out its actions.
func (s *source) handle(ev event, err error) {
	if short := s.step(ev, err); short != nil {
		s.addLater(short)
	}
}

// step is handle's work under the source's lock. When the runner refuses
// the lane for lack of descriptors it returns the refusal, for handle to
// retry once the lock is released.
func (s *source) step(ev event, err error) (short error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	again := false
	if ev == evFinished && errors.Is(err, io.EOF) && !s.lc.stopping {
		// Ask only at a clean end: Again may count passes.
		if r, ok := s.src().(srcs.Repeater); ok {
			again = r.Again()
		}
	}
	failed := s.lc.failures // failures in a row before this event
	acts, attempt := s.lc.step(ev, err, again)
	s.state.Store(uint32(s.lc.state))
	if ev == evOpened && failed > 0 && acts&actAdd != 0 {
		s.recovered(int(failed))
	}
	if ev == evOpenFailed && s.lc.reconnect {
		s.coldPart().unreachable = true
	}
	var drops uint64
	if acts&actEOS != 0 {
		// The kernel counts drops on the socket: read them before it closes.
		drops = s.kernelDrops()
	}
	if acts&actClose != 0 {
		if cerr := s.src().Close(); cerr != nil {
			if ev == evFinished && errors.Is(err, io.EOF) {
				// A session that looked like a clean end to the runner
				// may have been cut by its source (an MQTT keepalive
				// timeout shuts the socket down): Close says why.
				s.report("close", cerr)
			} else {
				s.e.log.Debug("close", "source", s.id(), "name", s.name, "err", cerr)
			}
		}
	}
	if acts&actReport != 0 {
		op := "read"
		if ev == evOpenFailed {
			op = "open"
		}
		s.reportFailure(op, err, acts)
	}
	switch {
	case acts&actAdd != 0:
		aerr := s.runner().Add(&s.lane)
		switch {
		case aerr == nil:
		case outOfDescriptors(aerr):
			short = aerr
		default:
			// The runner refused the lane (a thread cap, a closed runner):
			// that ends this session like a read error would.
			s.e.spawn(func() { s.handle(evFinished, aerr) })
		}
	case acts&actRemove != 0:
		s.runner().Remove(&s.lane)
	case acts&actOpen != 0:
		s.e.spawn(s.open)
	case acts&actOpenAfter != 0:
		// The lifecycle counts failures from 1; Delay counts retries from 0.
		d := s.coldPart().backoff.Delay(max(attempt-1, 0), rand.Float64)
		level := contract.LevelDebug
		if reported(attempt) {
			level = contract.LevelInfo
		}
		contract.Log(s.e.log, level, "source backing off", "source", s.id(), "name", s.name, "attempt", attempt, "delay", d)
		s.e.spawn(func() {
			ctx, done := s.beginOp()
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				done()
				s.handle(evRetry, nil)
			case <-ctx.Done():
				done()
			}
		})
	}
	if ev == evFinished && acts&(actOpen|actOpenAfter) != 0 {
		// The session ended and the source goes on. Under s.mu, so the
		// mark is queued before the next session can emit.
		if c := s.cold.Load(); c != nil && c.sessionEnds {
			// seq first: stats, which loads seq before sessions, may
			// then count the mark as a chunk for a moment, but never
			// count below zero.
			seq := s.seq.Add(1) - 1
			c.sessions.Add(1)
			final := s.stats()
			// The session's end, not the source's state: Closed when the
			// peer ended it cleanly, Failed with the error that ended it.
			final.State, final.LastErr = Closed, nil
			if !errors.Is(err, io.EOF) {
				final.State = Failed
				if e := c.lastErr.Load(); e != nil {
					final.LastErr = *e
				}
			}
			s.e.deliver(s, item{chunk: Chunk{src: s, Source: s.id(), Name: s.name, Seq: seq, SessionEnd: true, Emitted: time.Now(), Final: &final}})
		}
	}
	if acts&actEOS != 0 {
		s.lane.Account.Leave()
		final := s.stats()
		final.KernelDrops = max(final.KernelDrops, drops)
		if final.State == Closed {
			// A clean end: an error the source recovered from, or one
			// that did not end it (a skipped record), is not its end's.
			final.LastErr = nil
		}
		s.e.deliver(s, item{chunk: Chunk{src: s, Source: s.id(), Name: s.name, Seq: s.seq.Load(), Flags: srcs.EndOfStream, Emitted: time.Now(), Final: &final}})
		s.e.sourceDone(s)
	}
	return short
}

// Bounds of the back-off while a runner has no descriptor for a lane.
const (
	addBackoffMin = 5 * time.Millisecond
	addBackoffMax = time.Second
)

// outOfDescriptors says whether a runner refused a lane for lack of
// descriptors (it duplicates a connection's to take it from Go's
// netpoller; the thread runner also needs one to wake the lane's thread):
// a shortage that passes as other sources end.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// addLater offers the lane to the runner again, backing off from 5ms
// doubling to 1s (a source ending cuts a wait short), until the runner
// takes it, refuses it for another reason, or the source is stopped. The
// session stays open meanwhile, so an accepted connection's bytes wait in
// the kernel instead of being lost with it. addLater runs on handle's
// caller: for an accepted connection that is the listener's loop, which
// then accepts nothing more, rather than taking the descriptors that
// ending sources free for connections that could not be served either.
func (s *source) addLater(err error) {
	s.e.noteShortage(s, err)
	ctx, done := s.beginOp()
	var delay time.Duration
	for {
		delay = min(max(2*delay, addBackoffMin), addBackoffMax)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.e.freed:
		case <-ctx.Done():
		}
		t.Stop()
		s.mu.Lock()
		if ctx.Err() != nil || s.lc.stopping {
			// Never handed to the runner, the lane gets no Finish from it.
			s.mu.Unlock()
			done()
			s.handle(evFinished, srcs.ErrStopped)
			return
		}
		err = s.runner().Add(&s.lane)
		s.mu.Unlock()
		switch {
		case err == nil:
			done()
			return
		case !outOfDescriptors(err):
			done()
			s.handle(evFinished, err)
			return
		}
		s.e.noteShortage(s, err)
	}
}

// beginOp returns the context for an Open or a backoff wait, and the
// function that ends it. The context ends when the source is stopped or
// ends, or the engine shuts down.
func (s *source) beginOp() (context.Context, func()) {
	ctx, cancel := context.WithCancel(s.e.ctx)
	c := s.coldPart()
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.ended {
		cancel()
		return ctx, func() {}
	}
	c.opCancel = cancel
	return ctx, func() {
		c.opMu.Lock()
		c.opCancel = nil
		c.opMu.Unlock()
		cancel()
	}
}

// endOps cancels the operation in progress and every later one.
func (s *source) endOps() {
	c := s.coldPart()
	c.opMu.Lock()
	c.ended = true
	cancel := c.opCancel
	c.opCancel = nil
	c.opMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// open runs one Open and feeds its outcome back.
func (s *source) open() {
	ctx, done := s.beginOp()
	err := s.src().Open(ctx)
	done()
	if err != nil {
		s.handle(evOpenFailed, err)
		return
	}
	s.handle(evOpened, nil)
}

// stop asks the source to stop, whatever state it is in.
func (s *source) stop() {
	s.endOps()
	s.handle(evStop, nil)
}

// idleWatch is a source's idle timeout (WithIdleTimeout): the time of its
// last delivery, and a timer that looks at it.
type idleWatch struct {
	d     time.Duration
	start time.Time    // what last counts from
	last  atomic.Int64 // when the source last delivered, since start
	timer *time.Timer
}

// watchIdle starts s's idle timeout of d.
func (s *source) watchIdle(d time.Duration) {
	w := &idleWatch{d: d, start: time.Now()}
	s.coldPart().idle = w
	w.timer = time.AfterFunc(d, func() { s.idleCheck(w) })
}

// idleCheck runs when s may have gone d without a delivery: it stops s if
// so, and looks again when it could next be.
func (s *source) idleCheck(w *idleWatch) {
	if State(s.state.Load()).Done() {
		return
	}
	now := time.Since(w.start)
	if _, paused, _ := s.e.flow.snapshot(); paused || s.lane.Account.Stats().Waiting {
		// Held back, not idle: its rate limit or the pool lends it no
		// buffer, or delivery paused reading. It counts as active.
		w.last.Store(int64(now))
	}
	if quiet := now - time.Duration(w.last.Load()); quiet < w.d {
		w.timer.Reset(w.d - quiet)
		return
	}
	// As StopSource does, under the engine's lock, so that Shutdown
	// waits for the task.
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if s.e.closing || s.e.sources.get(s.id()) != s {
		return
	}
	s.e.spawn(func() { s.idleEnd(w) })
}

// idleEnd ends a source that went idle: the error goes behind its data and
// before its end, unless the source ended or was stopped meanwhile.
func (s *source) idleEnd(w *idleWatch) {
	s.mu.Lock()
	if s.lc.state.Done() || s.lc.stopping {
		s.mu.Unlock()
		return
	}
	s.e.totals.idleTimeouts.Add(1)
	s.report("read", fmt.Errorf("%w after %v", ErrIdleTimeout, w.d))
	s.mu.Unlock()
	s.stop()
}

// reported says whether the attempt-th failure in a row of a source
// that reconnects reaches the error handler: the first, then the second,
// fourth, eighth and so on, so that an outage is reported at a rate that
// falls as it lasts (ten reports over 821 attempts), not once per retry.
func reported(attempt int) bool { return attempt > 0 && attempt&(attempt-1) == 0 }

// reportFailure reports a failed open or session, which acts says the
// source backs off from (actOpenAfter) or ends on. Every failure is
// counted and becomes the source's LastErr; of the failures in a row of
// a source that backs off, those reported (see reported) reach the error
// handler, each after the first saying how many attempts have failed
// since when. The failure that ends a source always reaches it. Under
// the source's mu.
func (s *source) reportFailure(op string, err error, acts actions) {
	n := int(s.lc.failures)
	if !s.lc.reconnect || n == 0 {
		s.report(op, err)
		return
	}
	c := s.coldPart()
	if n == 1 {
		c.outage = time.Now()
	}
	switch {
	case n > 1 && acts&actEOS != 0:
		err = fmt.Errorf("gave up after %s over %v: %w", attempts(n, "attempt"), time.Since(c.outage).Round(time.Millisecond), err)
	case n > 1 && reported(n):
		err = fmt.Errorf("still failing after %s over %v: %w", attempts(n, "attempt"), time.Since(c.outage).Round(time.Millisecond), err)
	case n > 1 && acts&actEOS == 0:
		s.count(op, err)
		return
	}
	s.report(op, err)
}

// attempts says "1 attempt" or "n attempts", of what.
func attempts(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// recovered clears the LastErr of a source that reconnects and has
// opened again after failed failures in a row, and tells the error
// handler (ErrReconnected) if one of them was an open that failed: the
// source was unreachable, and nothing else would say it is back. A session
// that failed and opened again at once shows that in its next chunks.
// Under the source's mu.
func (s *source) recovered(failed int) {
	c := s.coldPart()
	c.lastErr.Store(nil)
	if !c.unreachable {
		return
	}
	c.unreachable = false
	d := time.Since(c.outage).Round(time.Millisecond)
	s.e.log.Info("source connected again", "source", s.id(), "name", s.name, "failed_attempts", failed, "over", d)
	s.notify("open", fmt.Errorf("%w after %s over %v", ErrReconnected, attempts(failed, "failed attempt"), d))
}

// notify queues for the error handler, behind the source's data, what is
// no error of the source's: it is not counted, and is not its LastErr.
func (s *source) notify(op string, err error) {
	serr := &srcs.SourceError{ID: s.id(), Name: s.name, Op: op, Err: err}
	s.e.deliver(s, item{chunk: Chunk{Source: s.id(), Name: s.name}, err: serr})
}

// count counts an error of the source, and makes it its LastErr, without
// handing it to the error handler.
func (s *source) count(op string, err error) *srcs.SourceError {
	c := s.coldPart()
	c.errs.Add(1)
	s.e.totals.failed(op, err)
	serr := &srcs.SourceError{ID: s.id(), Name: s.name, Op: op, Err: err}
	var e error = serr
	c.lastErr.Store(&e)
	return serr
}

// report queues an error behind the source's data, so the error handler
// sees it only after every chunk read before it.
func (s *source) report(op string, err error) {
	serr := s.count(op, err)
	s.e.deliver(s, item{chunk: Chunk{Source: s.id(), Name: s.name}, err: serr})
}

// SourceStats is a snapshot of one source.
type SourceStats struct {
	ID   srcs.ID
	Name string
	// Runner is the runner reading the source: the engine's, or
	// "goroutine" for a source without a descriptor or over TLS.
	Runner   string
	State    State
	Bytes    uint64
	Chunks   uint64
	Partials uint64
	// Errors counts the source's errors, every one, reported or not.
	// LastErr is the error of its last failure while it has not
	// recovered from it: kept while it backs off, and once it failed,
	// cleared when it opens again; a Closed source's end-of-stream chunk
	// has none.
	Errors  uint64
	LastErr error
	// DatagramsTooLarge counts datagrams dropped for not fitting a buffer;
	// KernelDrops counts those the kernel dropped before sluice could read
	// them, for sources that can tell (srcs.DropCounter).
	DatagramsTooLarge uint64
	KernelDrops       uint64
	// RecordsSkipped counts records of a framed source skipped for being
	// too long (srcs.RecordError).
	RecordsSkipped uint64
	// PoolWaits counts the times the source had to queue for a buffer;
	// Held is the buffers charged to it now, including chunks not yet
	// released by processing.
	PoolWaits uint64
	Held      int
	// RateHolds counts the times its rate limit held the source
	// (WithRateLimit), and RateHeld is the time it spent so held, the
	// hold in progress included; RateLimited says a hold is in progress.
	// A hold is not a pool wait: it counts in none of PoolWaits.
	RateHolds   uint64
	RateHeld    time.Duration
	RateLimited bool
}

func (s *source) stats() SourceStats {
	ps := s.lane.Account.Stats()
	st := SourceStats{
		ID: s.id(), Name: s.name, Runner: s.runner().Name(), State: State(s.state.Load()),
		Bytes: s.bytes.Load(), Chunks: s.seq.Load(),
		PoolWaits: ps.Waits, Held: ps.Held, RateHolds: ps.RateHolds, RateHeld: ps.RateHeld, RateLimited: ps.RateLimited,
	}
	if c := s.cold.Load(); c != nil {
		st.Chunks -= c.sessions.Load()
		st.Partials = c.partials.Load()
		st.Errors = c.errs.Load()
		if e := c.lastErr.Load(); e != nil {
			st.LastErr = *e
		}
		st.DatagramsTooLarge = c.dropped.Load()
		st.RecordsSkipped = c.skipped.Load()
	}
	st.KernelDrops = s.kernelDrops()
	return st
}

// kernelDrops returns what the kernel dropped before the source could read
// it, for a source that can tell (srcs.DropCounter), and 0 otherwise or
// once it is closed.
func (s *source) kernelDrops() uint64 {
	if dc, ok := s.src().(srcs.DropCounter); ok {
		if n, err := dc.Drops(); err == nil {
			return n
		}
	}
	return 0
}
