package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// ErrClosed is returned by an engine that has shut down. It matches
// net.ErrClosed (errors.Is), and says only that the engine is closed.
var ErrClosed error = closedError{}

// errAdd is the error of an add refused because the engine has shut
// down (err is ErrClosed): it says so, and matches ErrClosed.
func errAdd(what string, err error) error {
	return fmt.Errorf("%w: cannot add %s after Shutdown", err, what)
}

// closedError is ErrClosed.
type closedError struct{}

func (closedError) Error() string        { return "engine: closed" }
func (closedError) Is(target error) bool { return target == net.ErrClosed }

// ErrUnread is wrapped by the error of a pull-mode Shutdown that leaves
// chunks behind: queued and not taken, or source errors queued for the
// error handler behind them (Next and Chunks still return them), or
// chunks taken and not released. The pool stays mapped until the last of
// those chunks is released.
var ErrUnread = errors.New("engine: chunks left behind")

// ErrReconnected marks what the error handler hears when a source that
// reconnects (a srcs.Reconnector) opens again after failed opens: a
// *srcs.SourceError whose Err matches it and says after how many attempts
// over how long ("engine: connected again after 12 failed attempts over
// 1m3s"). It is no failure, and counts as none: it ends the outage that
// the failures reported before it began.
var ErrReconnected = errors.New("engine: connected again")

// ErrIdleTimeout is the error of a source ended by its idle timeout
// (WithIdleTimeout). It matches srcs.ErrTimeout, and counts as a timeout.
var ErrIdleTimeout = fmt.Errorf("engine: no data: %w", srcs.ErrTimeout)

// Handler processes one chunk and must Release it, now or later. It runs
// on the engine's processing goroutines, apart from the I/O workers; a
// source's chunks always reach the same goroutine, in order. An inline
// handler (WithInlineHandler) runs where the chunk was read instead.
type Handler func(c Chunk)

// ErrorHandler receives every source error, as a *srcs.SourceError naming
// the source, after every chunk the source read before the error. Errors
// travel in the delivery queue behind those chunks, so the handler runs on
// the consumer's side: on a processing goroutine in push mode, inside Next
// in pull mode.
//
// A clean end of stream is not an error and never reaches the handler:
// the source's end-of-stream chunk marks it (see ErrorKinds). What does
// reach it: open failures (an unreachable peer, a missing file), resets,
// timeouts and other read errors, datagrams and records too large to
// deliver, and a close that fails. A source that reconnects and keeps
// failing is reported at its first failure, then at its 2nd, 4th, 8th
// and so on, each saying how many attempts failed over how long; every
// failure counts (SourceStats.Errors, Totals.Errors). When it opens again
// after it could not (an open failed), the handler hears so: an error
// matching ErrReconnected, which is no failure.
type ErrorHandler func(err error)

// Engine ingests bytes from sources into one source pool and delivers
// them as chunks. It is safe for concurrent use. Every goroutine it starts
// has ended when Shutdown returns.
type Engine struct {
	cfg    Config
	log    srcs.Logger
	pool   *pool.Pool
	runner contract.Runner
	// side drives sources without a kernel descriptor when the main
	// runner needs one. Created on first use.
	side    contract.Runner
	handler Handler
	inline  bool // handler runs inside deliver (WithInlineHandler)
	onError ErrorHandler
	shards  []*queue
	flow    flow
	paused  atomic.Bool // the watermarks' last word, for runners created later
	totals  totals      // cumulative counters for monitoring (totals.go)

	// freed is signalled (coalescing) when a source ends and its
	// descriptors are closed, to cut short the wait of a source whose
	// runner had none (source.addLater). lastShort is when a runner last
	// refused a lane for lack of descriptors, in Unix nanoseconds.
	freed     chan struct{}
	lastShort atomic.Int64

	ctx    context.Context // ends at Shutdown: cancels opens and accepts
	cancel context.CancelFunc

	mu        sync.Mutex
	closing   bool
	sources   sourceSet // the sources not yet done
	nextID    srcs.ID
	allDone   chan struct{} // closed when closing and no source is left
	listeners []closer
	tasks     sync.WaitGroup // lifecycle steps, opens, accept loops
	handlers  sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error
	done         chan struct{} // closed when Shutdown completes

	unheard unheard // errors that reached no error handler (unheard.go)
	readers readers // the loops over Chunks in progress
}

// closer is what the engine needs of a listener at shutdown.
type closer interface{ Close() error }

// New validates cfg, probes the kernel, chooses a runner, maps the source
// pool and starts the runner's workers. Bad configuration fails here, with
// a *ConfigError that names the field.
func New(cfg Config, opts ...Option) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := options{log: contract.Discard{}, factories: defaultFactories()}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.inline:
		cfg.Delivery = DeliveryInline
	case cfg.Delivery == DeliveryInline && o.handler == nil:
		return nil, &ConfigError{"Delivery", cfg.Delivery, "needs a push handler (WithHandler): pull mode (Next) always queues"}
	case cfg.Delivery == DeliveryInline:
		o.inline = true
	}
	p, err := pool.New(cfg.poolConfig())
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	// The delivery queues exist before the runner, which may hold their
	// wake-ups from its first turn.
	hold := &wakeHold{}
	nshards := 1
	if o.handler != nil && !o.inline {
		nshards = cfg.Handlers
	}
	for range nshards {
		hold.shards = append(hold.shards, newQueue(hold))
	}
	rc := contract.RunnerConfig{Workers: cfg.Workers, Pool: p, MaxThreads: cfg.MaxThreads, Logger: o.log,
		BatchWait: cfg.BatchWait, Wakeups: hold, Inline: o.inline, FileSlots: cfg.FileSlots}
	if o.inline {
		rc.Wakeups = nil // nothing is queued: there is no one to wake
	}
	r, err := chooseRunner(cfg.Runner, rc, o.factories, o.log)
	if err != nil {
		p.Close()
		return nil, err
	}
	e := &Engine{
		cfg: cfg, log: o.log, pool: p, runner: r, handler: o.handler, inline: o.inline, onError: o.onError,
		allDone: make(chan struct{}), done: make(chan struct{}),
		freed: make(chan struct{}, 1),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.flow = flow{high: int64(cfg.QueueHigh), low: int64(cfg.QueueLow), setPaused: e.setPaused}
	e.shards = hold.shards
	if e.handler != nil && !e.inline {
		for _, q := range e.shards {
			e.handlers.Go(func() { e.serve(q) })
		}
	}
	every := o.stallAfter
	if every == 0 {
		every = defaultStallAfter
	}
	e.tasks.Go(func() { e.watchStalls(every) })
	e.log.Info("engine ready", "runner", r.Name(), "workers", cfg.Workers,
		"buffers", cfg.Buffers, "buf_size", cfg.BufSize, "flush", cfg.Flush)
	return e, nil
}

// Runner returns the name of the runner the engine chose.
func (e *Engine) Runner() string { return e.runner.Name() }

// Pool returns the engine's source pool, for inspection.
func (e *Engine) Pool() *pool.Pool { return e.pool }

// AddSource registers src and returns the id its chunks will carry. Ids
// count from 1; a failed AddSource returns 0, which is no source's id.
// After Shutdown it fails with an error that matches ErrClosed.
//
// A source that can reconnect (a srcs.Reconnector: the TCP, unix and MQTT
// clients) is opened in the background, and AddSource does not wait for
// it: a failed open reaches the error handler and is retried with backoff
// (Reconnector), as are the failures of later sessions, until the
// source's attempts run out.
//
// Any other source (a file, a tail, a UDP socket, a source of the
// caller's) is opened before AddSource returns, and a failed open is
// AddSource's error, the source's own (for a missing file it wraps
// fs.ErrNotExist); nothing is then registered, and the error handler
// hears nothing. Such a source is never retried: what fails once it is
// running (a read error, or for a repeated file a later open) reaches the
// error handler behind its data, and ends the source, Failed, with its
// end-of-stream chunk. Shutdown cuts a slow open short.
func (e *Engine) AddSource(src srcs.Source, opts ...SourceOption) (srcs.ID, error) {
	if _, ok := src.(srcs.Reconnector); ok {
		s, added, err := e.newSource(src, opts)
		if err != nil {
			return 0, err
		}
		s.announce(added)
		e.spawn(s.open)
		return s.id(), nil
	}
	if e.ctx.Err() != nil {
		return 0, errAdd("source "+src.Name(), ErrClosed)
	}
	// Bad options fail before anything is opened.
	if _, err := e.sourceOptions(src, opts); err != nil {
		return 0, err
	}
	if err := src.Open(e.ctx); err != nil {
		return 0, fmt.Errorf("engine: add source: %w", err)
	}
	s, added, err := e.newSource(src, opts)
	if err != nil {
		src.Close()
		return 0, err
	}
	s.announce(added)
	// In the background, as the open would have been: a runner short of
	// descriptors keeps the source waiting (addLater), not the caller.
	e.spawn(func() { s.handle(evOpened, nil) })
	return s.id(), nil
}

// addOpened registers a source whose session is already open (an accepted
// connection) and hands it to the runner.
func (e *Engine) addOpened(src srcs.Source, opts []SourceOption) error {
	s, added, err := e.newSource(src, opts)
	if err != nil {
		return err
	}
	s.announce(added)
	s.handle(evOpened, nil)
	return nil
}

// newSource registers src, and returns it with its WithAdded hook, for
// announce: the source keeps no field for a hook called once.
func (e *Engine) newSource(src srcs.Source, opts []SourceOption) (*source, func(srcs.ID, srcs.Source), error) {
	so, err := e.sourceOptions(src, opts)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return nil, nil, errAdd("source "+src.Name(), ErrClosed)
	}
	// The runner is made here if need be; s.runner() finds it again.
	if _, err := e.runnerForLocked(src); err != nil {
		return nil, nil, err
	}
	s := &source{e: e, name: src.Name()}
	if so.sessionEnds {
		s.coldPart().sessionEnds = true
	}
	if rc, ok := src.(srcs.Reconnector); ok {
		c := s.coldPart()
		c.backoff = rc.Reconnect().WithDefaults()
		s.lc.reconnect = true
		s.lc.attempts = int32(min(c.backoff.Attempts, math.MaxInt32))
	}
	rel, relOK := src.(srcs.ReleaseObserver)
	obs, obsOK := src.(srcs.ChunkObserver)
	if relOK || obsOK {
		w := &watched{obs: obs}
		if relOK {
			w.rel = &releases{obs: rel}
		}
		s.coldPart().w = w
	}
	e.nextID++ // from 1: the id 0 is no source's, as AddSource's failures return it
	id := e.nextID
	s.lane = contract.Lane{ID: id, Src: src, Account: e.pool.Join(id), Flush: so.flush, Framer: so.framer, Out: s}
	if so.rate > 0 {
		s.lane.Account.SetRate(so.rate, so.burst)
		s.coldPart().limited = true
	}
	if so.idle > 0 {
		s.watchIdle(so.idle)
	}
	if so.state != nil {
		s.coldPart().user = so.state(id, s.name)
	}
	e.sources.add(s)
	return s, so.added, nil
}

// liveLocked returns the live sources.
func (e *Engine) liveLocked() []*source {
	list := make([]*source, 0, e.sources.len())
	e.sources.each(func(s *source) { list = append(list, s) })
	return list
}

// shardOf returns the delivery queue of the source with id.
func (e *Engine) shardOf(id srcs.ID) *queue {
	if len(e.shards) == 1 {
		return e.shards[0]
	}
	return e.shards[id%srcs.ID(len(e.shards))]
}

// announce calls the source's WithAdded hook, if any. Its callers call it
// before they start the source, so nothing about the source has reached
// a handler yet, and outside e.mu, so the hook may take its own locks.
func (s *source) announce(added func(srcs.ID, srcs.Source)) {
	if added != nil {
		added(s.id(), s.src())
	}
}

// runnerForLocked picks the runner for a source: the engine's runner,
// unless it drives descriptors and the source has none, or one that
// carries ciphertext (a TLS session, contract.Encrypted), which only the
// source's Read can decrypt.
func (e *Engine) runnerForLocked(src srcs.Source) (contract.Runner, error) {
	if rawReadable(src) || e.runner.Name() == RunnerGoroutine {
		return e.runner, nil
	}
	if e.side == nil {
		r, err := newGoroutineRunner(contract.RunnerConfig{Pool: e.pool, Logger: e.log})
		if err != nil {
			return nil, err
		}
		if e.paused.Load() {
			r.SetPaused(true)
		}
		e.side = r
		e.log.Info("sources without a descriptor, and TLS sessions, use the goroutine runner", "main", e.runner.Name())
	}
	if enc, ok := src.(contract.Encrypted); ok && enc.Encrypted() {
		e.log.Debug("TLS source on the goroutine runner, decrypting into pool buffers", "name", src.Name())
	}
	return e.side, nil
}

// rawReadable says whether a runner that drives descriptors can read src.
func rawReadable(src srcs.Source) bool {
	if _, ok := src.(contract.Directed); ok {
		return true // the runner accepted it
	}
	if _, ok := src.(contract.Descriptor); !ok {
		return false
	}
	enc, ok := src.(contract.Encrypted)
	return !ok || !enc.Encrypted()
}

// StopSource stops one source: its reads are cancelled, bytes already
// read are delivered, then its end-of-stream chunk. It does not wait.
func (e *Engine) StopSource(id srcs.ID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sources.get(id)
	switch {
	case e.closing:
		return nil // Shutdown stops every source
	case s == nil:
		return fmt.Errorf("engine: stop source %d: no such source", id)
	}
	e.spawn(s.stop)
	return nil
}

// spawn runs f on a tracked goroutine.
func (e *Engine) spawn(f func()) { e.tasks.Go(f) }

// sourceDone is called once per source when its lifecycle ends.
func (e *Engine) sourceDone(s *source) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sources.remove(s.id())
	s.endOps()
	if c := s.cold.Load(); c != nil && c.idle != nil {
		c.idle.timer.Stop()
	}
	select {
	case e.freed <- struct{}{}:
	default:
	}
	if e.closing && e.sources.len() == 0 {
		close(e.allDone)
	}
}

// deliver queues an item on the source's shard and applies backpressure,
// or with an inline handler hands it over at once.
func (e *Engine) deliver(s *source, it item) {
	if e.inline {
		e.deliverInline(it)
		return
	}
	it.src = s
	if it.chunk.data() {
		e.flow.add(1)
	}
	e.shardOf(s.lane.ID).push(it)
}

// deliverInline hands an item to the inline handler, or its error to the
// error handler, on the goroutine that read it.
func (e *Engine) deliverInline(it item) {
	if it.err != nil {
		e.reportError(it.err)
		return
	}
	if it.chunk.data() {
		e.totals.took(&it.chunk, time.Now())
	}
	e.handler(it.chunk)
}

func (e *Engine) setPaused(p bool) {
	e.paused.Store(p)
	e.runner.SetPaused(p)
	e.mu.Lock()
	side := e.side
	e.mu.Unlock()
	if side != nil {
		side.SetPaused(p)
	}
}

// shortageQuiet is how long runners must go without refusing a lane for
// lack of descriptors before the next refusal counts as a new shortage,
// which is logged at Warn; refusals within a shortage are logged at Debug,
// so a long one cannot flood the log.
const shortageQuiet = time.Minute

// noteShortage logs a runner's refusal of s's lane for lack of
// descriptors.
func (e *Engine) noteShortage(s *source, err error) {
	now := time.Now().UnixNano()
	level := contract.LevelDebug
	if last := e.lastShort.Swap(now); last == 0 || now-last > int64(shortageQuiet) {
		level = contract.LevelWarn
	}
	contract.Log(e.log, level, "source waits for a descriptor; retrying",
		"source", s.id(), "name", s.name, "err", err)
}

func (e *Engine) reportError(err error) {
	if e.onError != nil {
		e.onError(err)
		return
	}
	if errors.Is(err, ErrReconnected) {
		e.log.Info("source error", "err", err) // the end of an outage: no failure
		return
	}
	e.log.Warn("source error", "err", err)
	e.unheard.add(err)
}
