package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"net"
	"reflect"
	"runtime"
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

// Option configures the injected pieces of an engine.
type Option func(*options)

type options struct {
	log        srcs.Logger
	handler    Handler
	inline     bool
	onError    ErrorHandler
	factories  map[string]factory
	stallAfter time.Duration
}

// WithLogger sets the logger for start-up decisions and source trouble:
// a *slog.Logger, or anything else with its Debug, Info, Warn and Error
// (srcs.Logger). The default, and a nil l, discards everything.
func WithLogger(l srcs.Logger) Option { return func(o *options) { o.log = contract.OrDiscard(l) } }

// WithHandler selects push delivery: h runs for every chunk on
// Config.Handlers processing goroutines. Without it, consumers pull with
// Next.
func WithHandler(h Handler) Option { return func(o *options) { o.handler, o.inline = h, false } }

// WithInlineHandler selects inline delivery: h runs for every chunk on
// the goroutine that read it, a uring or epoll worker's locked thread or
// the source's own goroutine or thread, with no queue between them and no
// thread woken to run it. A source's chunks still reach h one at a time,
// in order, and its errors reach the ErrorHandler in order behind them,
// on the same goroutines.
//
// It is for cheap consumers that never block: a checksum, a count, a copy
// into a batch that another goroutine sends. While h runs, its worker
// reads for none of its sources, and a blocked h stalls all of them. h
// may call Shutdown, which then returns at once (see Shutdown).
// Backpressure then comes from the pool alone:
// chunks h keeps hold their buffers, and the delivery watermarks
// (QueueHigh, QueueLow) do not apply. Config.Handlers is ignored. The
// default, WithHandler, keeps processing apart from I/O; WithHandler
// with Config.Delivery "inline" is the same as WithInlineHandler.
func WithInlineHandler(h Handler) Option {
	return func(o *options) { o.handler, o.inline = h, h != nil }
}

// WithErrorHandler sets the receiver of source errors. Without one they
// are logged at level Warn (WithLogger; the default logger discards), and
// Shutdown returns them: the first few, and how many there were.
func WithErrorHandler(h ErrorHandler) Option { return func(o *options) { o.onError = h } }

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

// readers counts the loops over Chunks in progress, for a pull-mode
// Shutdown that waits for them to take what is queued. Safe for
// concurrent use.
type readers struct {
	mu     sync.Mutex
	n      int
	parked int           // loops whose body waits in Shutdown: not waited for
	change chan struct{} // closed when n or parked changes; nil until a wait asks
}

// add counts a loop that begins (1) or ends (-1).
func (r *readers) add(d int) { r.update(&r.n, d) }

// park counts a loop whose body enters (1) or leaves (-1) Shutdown.
func (r *readers) park(d int) { r.update(&r.parked, d) }

func (r *readers) update(v *int, d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*v += d
	if r.change != nil {
		close(r.change)
		r.change = nil
	}
}

// wait blocks until every loop in progress has ended or waits in
// Shutdown, or ctx ends.
func (r *readers) wait(ctx context.Context) error {
	for {
		r.mu.Lock()
		if r.n <= r.parked {
			r.mu.Unlock()
			return nil
		}
		if r.change == nil {
			r.change = make(chan struct{})
		}
		change := r.change
		r.mu.Unlock()
		select {
		case <-change:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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

// SourceOption adjusts one source.
type SourceOption func(*sourceOpts)

type sourceOpts struct {
	flush       time.Duration
	framer      srcs.Framer
	framerOK    bool // WithFraming was given, maybe with nil
	added       func(srcs.ID, srcs.Source)
	sessionEnds bool
	rate, burst int64         // WithRateLimit
	idle        time.Duration // WithIdleTimeout
	state       func(srcs.ID, string) any
}

// WithFlush overrides the engine's flush timeout for one source. Zero
// delivers after every read.
func WithFlush(d time.Duration) SourceOption { return func(o *sourceOpts) { o.flush = d } }

// WithFraming delivers the source in whole records framed by f (see
// srcs.Framer and srcs.ParseFraming); nil delivers raw bytes. It overrides
// the framer of a srcs.Framed source.
func WithFraming(f srcs.Framer) SourceOption {
	return func(o *sourceOpts) { o.framer, o.framerOK = f, true }
}

// WithAdded calls f with a source's id as soon as the engine has
// registered it, before the source's first chunk or error reaches the
// handler or the error handler. Given to AddListener, it is called once
// for every connection the listener accepts, on the listener's accept
// loop: that is how a caller tells which listener a connection came from
// without matching names. f must not block. Under the uring runner a
// listener's connection is accepted into a worker's file table and has
// no descriptor in the process, so set socket options on the listener,
// whose accepted sockets inherit them (srcs.ListenerConfig RecvBuffer,
// keepalive). Where a connection offers its socket (syscall.Conn, as a
// srcs.Conn does), tune it in f, not after: once the source starts, its
// runner may take the socket for itself (the uring runner into its file
// table, Config.FileSlots), and SyscallConn fails.
func WithAdded(f func(id srcs.ID, src srcs.Source)) SourceOption {
	return func(o *sourceOpts) { o.added = f }
}

// WithSessionEnds makes a source that opens again after a session ends
// (a srcs.Reconnector such as srcs.NewTCPClient, after the peer closed or
// the connection failed; a repeated file, after each pass) deliver an
// empty chunk with SessionEnd set, and Final holding its counters, at the
// end of each session but its last, which ends with the end-of-stream
// chunk. It comes after the session's data and after the error that
// ended it, and before the next session's first chunk, so a consumer can
// close its books per connection. Without it, a reconnecting source's
// chunks run on across sessions with no mark between them.
func WithSessionEnds() SourceOption { return func(o *sourceOpts) { o.sessionEnds = true } }

// WithRateLimit holds a source to bytesPerSecond by not reading it while
// it is ahead: no buffer, no read, and the kernel's socket buffer fills,
// so TCP's window slows that sender alone and nothing is lost (a datagram
// socket drops what its buffer cannot hold, counted in KernelDrops). An
// idle source may read burst bytes at once; a burst below one buffer is
// one buffer, and a source may read up to a buffer past its limit before
// it is held. Given to AddListener, it holds each connection to the rate
// on its own. SourceStats.RateHeld says how long the limit held a source.
func WithRateLimit(bytesPerSecond, burst int64) SourceOption {
	return func(o *sourceOpts) { o.rate, o.burst = bytesPerSecond, burst }
}

// WithIdleTimeout ends a source that delivered no byte for d: it stops as
// StopSource stops it, after ErrIdleTimeout reaches the error handler, and
// counts in Totals.IdleTimeouts. A source's bytes count when the engine
// delivers them, up to its flush timeout after they arrived. Given to
// AddListener, it closes each connection that goes quiet, so that a
// listener with a connection cap does not fill with dead peers. Zero
// means no timeout.
func WithIdleTimeout(d time.Duration) SourceOption { return func(o *sourceOpts) { o.idle = d } }

// WithSourceState gives each source a value of the caller's, as gnet's
// Conn.SetContext does: newState makes it when the source is registered
// (for a listener, for each connection, on its accept loop), with the
// source's id and name, and every chunk of the source carries it
// (Chunk.State), its end-of-stream chunk too, which is where to close the
// books. With a handler (WithHandler, WithInlineHandler) a source's chunks
// are handled one at a time and in order, each after the one before has
// returned, so the handler may change the value without a lock; with
// Next, that is the caller's to arrange. newState must not block.
func WithSourceState(newState func(id srcs.ID, name string) any) SourceOption {
	return func(o *sourceOpts) { o.state = newState }
}

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

// sourceOptions applies and checks a source's options.
func (e *Engine) sourceOptions(src srcs.Source, opts []SourceOption) (sourceOpts, error) {
	so := sourceOpts{flush: e.cfg.Flush}
	for _, opt := range opts {
		opt(&so)
	}
	if err := so.check(); err != nil {
		return so, err
	}
	if fs, ok := src.(srcs.Framed); ok && !so.framerOK {
		so.framer = fs.Framer()
	}
	return so, e.checkFramer(so.framer)
}

// checkFramer refuses a framer the pool cannot serve.
func (e *Engine) checkFramer(f srcs.Framer) error {
	if f != nil && e.pool.Config().MaxPerSource < 2 {
		// A framed lane holds a full buffer while it takes the next one
		// for the incomplete record at its end.
		return &ConfigError{"MaxPerSource", e.pool.Config().MaxPerSource,
			"must be at least 2 for a framed source (" + f.String() + ")"}
	}
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

func (so *sourceOpts) check() error {
	switch {
	case so.flush < 0:
		return &ConfigError{"Flush", so.flush, "must not be negative"}
	case so.rate < 0:
		return &ConfigError{"WithRateLimit", so.rate, "bytes per second must not be negative"}
	case so.burst < 0:
		return &ConfigError{"WithRateLimit", so.burst, "burst must not be negative"}
	case so.idle < 0:
		return &ConfigError{"WithIdleTimeout", so.idle, "must not be negative"}
	}
	return nil
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

// Acceptor yields connections as sources: *srcs.Listener implements it.
type Acceptor interface {
	AcceptSource(ctx context.Context) (srcs.Source, error)
	Close() error
}

var _ Acceptor = (*srcs.Listener)(nil)

// descriptorAcceptor is the optional capability of an Acceptor that can
// yield its connections as raw descriptors, with no net.Conn in between
// (srcs.Listener.AcceptDescriptor). The engine uses it when its runner
// reads descriptors itself.
type descriptorAcceptor interface {
	AcceptDescriptor(ctx context.Context) (srcs.Source, error)
}

var _ descriptorAcceptor = (*srcs.Listener)(nil)

// AddListener serves every connection l accepts as a source, until
// Shutdown or l fails, with opts applied to each connection (WithAdded
// tells which connections are l's). The engine closes l at Shutdown. A
// connection the runner cannot take for lack of descriptors is kept open
// and offered to it again as other sources end; the listener accepts
// nothing more meanwhile. Under the uring and epoll runners a
// *srcs.Listener without TLS or the PROXY protocol is accepted in the
// runner's own loops (srcs.Listener.AcceptThrough): under uring on the
// workers' rings, each connection straight into a worker's file table;
// under epoll with accept4 on a readiness edge in a worker's loop. Under
// the thread runner it hands its connections over as raw sockets
// (srcs.Listener.AcceptDescriptor). Either way no net.Conn, netpoller
// registration or goroutine is made per connection.
func (e *Engine) AddListener(l Acceptor, opts ...SourceOption) error {
	so := sourceOpts{}
	for _, opt := range opts {
		opt(&so)
	}
	if err := so.check(); err != nil {
		return err
	}
	// What every connection would be refused for is refused here, once.
	if fl, ok := l.(srcs.Framed); ok && !so.framerOK {
		so.framer = fl.Framer()
	}
	if err := e.checkFramer(so.framer); err != nil {
		return err
	}
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return errAdd("listener", ErrClosed)
	}
	defer e.mu.Unlock()
	accept, stop := e.acceptorFor(l)
	e.listeners = append(e.listeners, l)
	// Spawned under the lock, so Shutdown either sees this loop or refused
	// the listener: nothing starts after it has waited for its tasks.
	e.spawn(func() {
		defer stop()
		for {
			src, err := accept(e.ctx)
			if err != nil {
				if e.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					e.log.Warn("listener stopped", "err", err)
					e.reportListener(l, fmt.Errorf("listener stopped: %w", err))
				}
				return
			}
			if err := e.addOpened(src, opts); err != nil {
				src.Close()
				if errors.Is(err, ErrClosed) {
					return
				}
				e.log.Warn("accepted connection refused", "name", src.Name(), "err", err)
				e.reportListener(l, fmt.Errorf("connection from %s refused: %w", src.Name(), err))
			}
		}
	})
	return nil
}

// acceptorFor picks how l's connections are accepted: by the runner on
// its own loops when it can (uring and epoll, for a listener without TLS
// or the PROXY protocol), else as raw sockets when the runner reads
// descriptors (thread), else as Go's connections. stop ends the accepting once the
// listener's loop is done.
func (e *Engine) acceptorFor(l Acceptor) (accept func(context.Context) (srcs.Source, error), stop func()) {
	if ar, ok := e.runner.(contract.AcceptRunner); ok {
		if ta, ok := l.(throughAcceptor); ok {
			ra, err := ta.AcceptThrough(ar)
			if err == nil {
				accept := func(ctx context.Context) (srcs.Source, error) { return ra.Accept(ctx) }
				return accept, func() {
					if err := ra.Close(); err != nil {
						e.log.Warn("listener: closing the runner's accepts", "err", err)
					}
				}
			}
			if !errors.Is(err, contract.ErrNotRunnerAcceptable) {
				e.log.Warn("listener: the runner cannot accept; accepting through Go", "err", err)
			}
		}
	}
	if da, ok := l.(descriptorAcceptor); ok && e.runner.Name() != RunnerGoroutine {
		// The runner reads sockets itself: no net.Conn, netpoller
		// registration or duplicated descriptor per connection.
		return da.AcceptDescriptor, func() {}
	}
	return l.AcceptSource, func() {}
}

// throughAcceptor is the optional capability of an Acceptor whose
// connections a runner can accept on its own loops
// (srcs.Listener.AcceptThrough).
type throughAcceptor interface {
	AcceptThrough(r contract.AcceptRunner) (contract.Acceptor, error)
}

var _ throughAcceptor = (*srcs.Listener)(nil)

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

// take pops the next chunk of q for a consumer, handing error events to
// the error handler on the way. ok is false when q is empty.
func (e *Engine) take(q *queue) (c Chunk, ok, done bool) {
	for {
		it, ok, done := q.pop()
		if !ok {
			return Chunk{}, false, done
		}
		if it.err != nil {
			e.reportError(it.err)
			continue
		}
		if it.chunk.data() {
			e.flow.add(-1)
			e.totals.took(&it.chunk, time.Now())
		}
		return it.chunk, true, false
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

// reportListener hands an error of a listener's to the error handler: on
// the delivery queue's consumer side, as a source's errors, or here with
// an inline handler.
func (e *Engine) reportListener(l Acceptor, err error) {
	serr := &srcs.SourceError{Name: acceptorName(l), Op: "accept", Err: err}
	if e.inline {
		e.reportError(serr)
		return
	}
	e.shards[0].push(item{chunk: Chunk{Name: serr.Name}, err: serr})
}

// acceptorName names a listener in its errors.
func acceptorName(l Acceptor) string {
	switch l := l.(type) {
	case interface{ Name() string }:
		return l.Name()
	case interface{ Addr() net.Addr }:
		return l.Addr().Network() + "://" + l.Addr().String()
	}
	return "listener"
}

// serve runs the push handler over one shard until it is closed and empty.
func (e *Engine) serve(q *queue) {
	for {
		c, ok, done := e.take(q)
		if ok {
			e.handler(c)
			continue
		}
		if done {
			return
		}
		select {
		case <-q.ready:
		case <-q.done:
		}
	}
}

// Next returns the next chunk in pull mode, blocking until one arrives, ctx
// ends, or the engine has shut down and every chunk was taken (ErrClosed).
// End-of-stream chunks are returned too, with no data. The caller must
// Release every chunk. Shutdown does not wait for a caller of Next: after
// it, Next goes on returning the chunks read before it, in order, and
// returns ErrClosed only after the last of them, so nothing read is lost.
// Chunks is the loop that does this and releases every chunk, and drains
// the engine when its context ends, where Next returns ctx's error. Next
// is safe for concurrent use; chunks of one source come out in order.
func (e *Engine) Next(ctx context.Context) (Chunk, error) {
	if e.handler != nil {
		return Chunk{}, errors.New("engine: Next: the engine delivers to a handler (WithHandler or WithInlineHandler)")
	}
	q := e.shards[0]
	for {
		c, ok, done := e.take(q)
		if ok {
			return c, nil
		}
		if done {
			return Chunk{}, ErrClosed
		}
		select {
		case <-q.ready:
		case <-q.done:
		case <-ctx.Done():
			return Chunk{}, ctx.Err()
		}
	}
}

// Chunks returns the pull-mode loop over the engine's chunks, for range:
//
//	for c, err := range e.Chunks(ctx) {
//		if err != nil {
//			return err // ctx ended
//		}
//		process(c.Data)
//	}
//
// It yields what Next returns, and releases each chunk when the loop body
// is done with it, so the body must not keep the chunk or its Data (a
// Release in the body is harmless). The loop ends by itself once the
// engine has shut down and every chunk read before has been yielded,
// whichever goroutine called Shutdown, before or during the loop.
//
// When ctx ends, the loop shuts the engine down and drains it, as
// http.Server's Shutdown drains its connections: the sources stop, and
// the loop goes on yielding what they read and every source's
// end-of-stream chunk, then ends. So the context of signal.NotifyContext
// stops a program cleanly on SIGINT; Shutdown, called after the loop,
// returns the shutdown's result. An error (the engine delivers to a
// handler) is yielded once, with no chunk, and ends the loop. Several
// goroutines may range over Chunks at once; each chunk reaches one of
// them, and Shutdown waits for every such loop to take what is queued.
func (e *Engine) Chunks(ctx context.Context) iter.Seq2[Chunk, error] {
	return func(yield func(Chunk, error) bool) { e.chunksLoop(ctx, yield) }
}

// chunksLoop is the loop Chunks returns. A goroutine with it on its
// stack is running a loop body (loopFuncs).
func (e *Engine) chunksLoop(ctx context.Context, yield func(Chunk, error) bool) {
	e.readers.add(1)
	defer e.readers.add(-1)
	for {
		c, err := e.Next(ctx)
		switch {
		case errors.Is(err, ErrClosed):
			return
		case err != nil && ctx.Err() != nil && e.handler == nil:
			// ctx ended: drain, as http.Server's Shutdown does. The
			// sources stop and the loop goes on with what they read,
			// their ends included, until the last.
			e.beginShutdown(context.Background())
			ctx = context.Background()
			continue
		case err != nil:
			yield(Chunk{}, err)
			return
		}
		if !yieldChunk(yield, c) {
			return
		}
	}
}

// yieldChunk hands c to the loop body and releases it when the body
// returns, or panics.
func yieldChunk(yield func(Chunk, error) bool, c Chunk) bool {
	defer c.Release()
	return yield(c, nil)
}

// Run blocks until ctx ends or Shutdown is called, then shuts the engine
// down and returns the shutdown's error.
func (e *Engine) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return e.Shutdown(context.Background())
	case <-e.done:
		return e.shutdownErr
	}
}

// Shutdown stops every source (each delivers what it read, then its
// end-of-stream chunk) and the runners. Then:
//
//   - With a handler (WithHandler), it lets processing drain the queues,
//     waits until every chunk is released, and unmaps the pool.
//   - In pull mode (Next, Chunks) it waits, once everything read is
//     queued, for the loops over Chunks in progress to take it (they end
//     once they have), as http.Server's Shutdown waits for its handlers.
//     It does not wait for a program that reads with Next, nor for the
//     loop whose body called it, which would hang: Next and Chunks go on
//     returning the queued chunks, and the source errors behind them,
//     until the last. What it leaves behind, queued and not taken or
//     taken and not released, it reports (ErrUnread); the pool is
//     unmapped when the last chunk is released, which may be after
//     Shutdown returned. Chunks nobody ever takes keep their buffers.
//
// Without an error handler (WithErrorHandler), the source errors of the
// engine's life are part of the result: the first few, and their count.
//
// If ctx ends first, it returns an error saying what was still
// outstanding; the pool then stays mapped while anything is held.
// Shutdown is idempotent; later calls return the first one's result.
// Every goroutine the engine started has ended when it returns.
//
// A handler may call Shutdown: a push or inline handler, or the error
// handler beside one (of this engine or another: Shutdown looks for a
// handler on the calling goroutine's stack). The shutdown must wait for
// that handler to return, so the call only begins it, under ctx, and
// returns nil at once; the shutdown finishes once the handler returns,
// and Run, or Shutdown called on another goroutine, waits for it and
// returns its result.
func (e *Engine) Shutdown(ctx context.Context) error {
	if onStack(handlerFuncs) {
		// The shutdown waits for this handler to return: it cannot be
		// waited for here.
		e.beginShutdown(ctx)
		return nil
	}
	own := onStack(loopFuncs)
	if own {
		// The body of a loop over Chunks: the shutdown must not wait for
		// that loop, which goes on once this returns.
		e.readers.park(1)
		defer e.readers.park(-1)
	}
	e.shutdownOnce.Do(func() {
		e.shutdownErr = e.shutdown(ctx, own)
		close(e.done)
	})
	<-e.done
	return e.shutdownErr
}

// beginShutdown starts the shutdown, under ctx, on a goroutine of its own,
// unless it has begun.
func (e *Engine) beginShutdown(ctx context.Context) {
	e.shutdownOnce.Do(func() {
		go func() {
			e.shutdownErr = e.shutdown(ctx, false)
			close(e.done)
		}()
	})
}

// handlerFuncs are the engine's functions that call a push handler or an
// error handler: a goroutine with one of them on its stack is running a
// handler, which a shutdown must wait for.
var handlerFuncs = map[string]bool{
	funcName((*Engine).serve):         true, // WithHandler's goroutines
	funcName((*Engine).deliverInline): true, // WithInlineHandler, where the chunk was read
}

// loopFuncs are those that run the body of a loop over Chunks.
var loopFuncs = map[string]bool{funcName((*Engine).chunksLoop): true}

func funcName(f any) string { return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name() }

// onStack says whether a function of funcs is on the calling goroutine's
// stack: for handlerFuncs, whether it runs a push handler, an inline
// handler, or an error handler called from either, of this engine or
// another.
func onStack(funcs map[string]bool) bool {
	pcs := make([]uintptr, 64)
	for {
		n := runtime.Callers(2, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if funcs[f.Function] {
			return true
		}
		if !more {
			return false
		}
	}
}

// shutdown is Shutdown's work; own says the caller is the body of a loop
// over Chunks, which takes what is queued once it returns.
func (e *Engine) shutdown(ctx context.Context, own bool) error {
	e.mu.Lock()
	e.closing = true
	if e.sources.len() == 0 {
		close(e.allDone)
	}
	listeners := e.listeners
	stopping := e.liveLocked()
	e.mu.Unlock()
	e.cancel()
	for _, l := range listeners {
		l.Close()
	}
	for _, s := range stopping {
		s.stop()
	}
	var errs []error
	select {
	case <-e.allDone:
	case <-ctx.Done():
		n := e.forceClose()
		errs = append(errs, fmt.Errorf("engine: shutdown: sources still running, %d sessions closed to unblock reads: %w", n, ctx.Err()))
	}
	// Once ctx has ended, the remaining steps get a short grace period of
	// their own: they only wait for work that has already been told to stop.
	wctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
	}
	if err := waitCtx(wctx, "runners", e.closeRunners); err != nil {
		return errors.Join(append(errs, err, e.unheard.err())...)
	}
	if err := waitCtx(wctx, "source tasks", func() error { e.tasks.Wait(); return nil }); err != nil {
		return errors.Join(append(errs, err, e.unheard.err())...)
	}
	for _, q := range e.shards {
		q.close()
	}
	if err := waitCtx(wctx, "processing handlers", func() error { e.handlers.Wait(); return nil }); err != nil {
		return errors.Join(append(errs, err, e.unheard.err())...)
	}
	if e.handler == nil {
		return errors.Join(append(errs, e.endPull(wctx, own), e.unheard.err())...)
	}
	// The handlers have drained the queues but may still hold chunks:
	// wait for their releases. Past ctx, the last release unmaps the pool.
	if err := e.pool.WaitIdle(ctx); err != nil {
		held := e.pool.Stats().InUse
		if cerr := e.pool.CloseWhenIdle(); cerr != nil {
			errs = append(errs, cerr)
		}
		errs = append(errs, fmt.Errorf("engine: shutdown: %d chunks still held by the handler, pool unmapped at their release: %w", held, err))
		return errors.Join(append(errs, e.unheard.err())...)
	}
	if err := e.pool.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(append(errs, e.unheard.err())...)
}

// unreadQuiet is how long a pull-mode Shutdown waits for a chunk left
// queued to be taken, before it reports what is left: a caller of Next
// that is still reading takes one sooner.
const unreadQuiet = 200 * time.Millisecond

// waitTaken waits while the delivery queues hold chunks or source errors
// and a reader keeps taking them, until they are empty, or nothing was
// taken for unreadQuiet, or ctx ends, and returns what is left.
func (e *Engine) waitTaken(ctx context.Context) (data, failures int) {
	var t *time.Ticker
	var last uint64
	since := time.Now()
	for {
		data, failures = 0, 0
		var popped uint64
		for _, q := range e.shards {
			d, f, p := q.count()
			data, failures, popped = data+d, failures+f, popped+p
		}
		switch {
		case data+failures == 0:
			return 0, 0
		case t == nil:
			t = time.NewTicker(unreadQuiet / 10)
			defer t.Stop()
		case popped != last:
			since = time.Now()
		case time.Since(since) >= unreadQuiet:
			return data, failures
		}
		last = popped
		select {
		case <-t.C:
		case <-ctx.Done():
			return data, failures
		}
	}
}

// endPull ends a pull-mode shutdown, once everything read is queued. It
// waits for the loops over Chunks in progress to take what is queued (they
// end once it is), as http.Server's Shutdown waits for its handlers, and
// for a program reading with Next while it keeps taking; not for a loop
// whose body called Shutdown, which would hang, nor for a reader that has
// stopped. What nobody takes, or takes and does not release, it reports:
// the pool stays mapped until the last chunk comes home, and Next and
// Chunks still return what is queued.
func (e *Engine) endPull(ctx context.Context, own bool) error {
	var errs []error
	if err := e.readers.wait(ctx); err != nil {
		errs = append(errs, fmt.Errorf("engine: shutdown: loops over Chunks still taking chunks: %w", err))
	}
	if !own {
		data, failures := e.waitTaken(ctx)
		held := e.pool.Stats().InUse - data
		what := fmt.Sprintf("%d chunks", data)
		if failures > 0 {
			what += fmt.Sprintf(" and %d source errors", failures)
		}
		switch {
		case data > 0 || failures > 0:
			errs = append(errs, fmt.Errorf("%w: %s queued and not taken: Next and Chunks still return them, and the pool stays mapped until the chunks are released", ErrUnread, what))
		case held > 0:
			errs = append(errs, fmt.Errorf("%w: %d chunks taken and not released: the pool stays mapped until they are", ErrUnread, held))
		}
	}
	if err := e.pool.CloseWhenIdle(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// shutdownGrace bounds the last steps of a Shutdown whose context ended.
const shutdownGrace = 5 * time.Second

func (e *Engine) closeRunners() error {
	err := e.runner.Close()
	e.mu.Lock()
	side := e.side
	e.mu.Unlock()
	if side != nil {
		err = errors.Join(err, side.Close())
	}
	return err
}

// forceClose closes the sessions of live sources on the goroutine runner:
// a Read without a deadline can only be interrupted that way. Descriptor
// runners cancel their reads themselves. It returns how many it closed.
func (e *Engine) forceClose() int {
	e.mu.Lock()
	var live []*source
	e.sources.each(func(s *source) {
		if s.runner().Name() == RunnerGoroutine {
			live = append(live, s)
		}
	})
	e.mu.Unlock()
	for _, s := range live {
		s.src().Close()
	}
	return len(live)
}

// waitCtx runs f and waits for it or for ctx. When ctx ends first, f keeps
// running and the error says what was still busy.
func waitCtx(ctx context.Context, what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("engine: shutdown: %s still running: %w", what, ctx.Err())
	}
}

// Stats is a snapshot of the engine.
type Stats struct {
	Runner  string
	Runners []RunnerStats
	Pool    pool.Stats
	// Queued is the number of chunks waiting for a consumer; Paused says
	// whether the watermarks have paused reading, and Pauses counts how
	// often they did.
	Queued  int64
	Paused  bool
	Pauses  uint64
	Sources []SourceStats
}

// Stats returns a snapshot of the engine, its runners, its pool and every
// live source. Its cost grows with the sources: a monitor that polls with
// many connections open uses Overview, CountSources and SourceStats.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	srcList := e.liveLocked()
	e.mu.Unlock()
	st := e.Overview()
	st.Sources = make([]SourceStats, 0, len(srcList))
	for _, s := range srcList {
		st.Sources = append(st.Sources, s.stats())
	}
	return st
}

// Overview returns Stats without Sources: the engine, its runners and its
// pool, at a cost that does not grow with the sources.
func (e *Engine) Overview() Stats {
	e.mu.Lock()
	side := e.side
	e.mu.Unlock()
	st := Stats{Runner: e.runner.Name(), Runners: []RunnerStats{RunnerStats(e.runner.Stats())}, Pool: e.pool.Stats()}
	if side != nil {
		st.Runners = append(st.Runners, RunnerStats(side.Stats()))
	}
	st.Queued, st.Paused, st.Pauses = e.flow.snapshot()
	return st
}

// SourceStats returns the figures of the live source with id, and false
// if no such source is live. Unlike Stats it costs the same with one
// source or a million, so it suits a health check that follows a few
// sources among many connections.
func (e *Engine) SourceStats(id srcs.ID) (SourceStats, bool) {
	e.mu.Lock()
	s := e.sources.get(id)
	e.mu.Unlock()
	if s == nil {
		return SourceStats{}, false
	}
	return s.stats(), true
}

// SourceCounts is how many live sources are in each state.
type SourceCounts [Failed + 1]int

// Live returns the number of live sources.
func (c SourceCounts) Live() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// CountSources counts the live sources by state. It allocates nothing:
// a monitor that polls it (a status line, a scrape, a health probe) makes
// no garbage per connection, where Stats copies every source's figures.
func (e *Engine) CountSources() SourceCounts {
	var c SourceCounts
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sources.each(func(s *source) {
		if st := State(s.state.Load()); int(st) < len(c) {
			c[st]++
		}
	})
	return c
}
