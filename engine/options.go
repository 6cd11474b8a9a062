package engine

import (
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

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
