package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"
)

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
