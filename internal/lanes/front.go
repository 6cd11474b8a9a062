package lanes

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/srcs"
)

// Front is the side of an event-loop runner that the engine's goroutines
// call, written once for the uring and epoll runners: the table of the
// lanes the runner drives, the add that refuses a closed runner or a lane
// already added (once before the source's descriptor is touched, which
// cannot be undone, and again when the lane is placed), placement on the
// least loaded worker still running, the first worker failure, and close.
// What a runner does with a placed lane stays its own.
//
// Name is the runner in errors ("ring: runner", "fallback: epoll"). A
// Front is safe for concurrent use once its fields are set.
type Front[W interface {
	comparable
	Worker
}] struct {
	Name    string
	Workers []W

	mu        sync.Mutex
	closed    bool
	table     Table[W]
	closeErrs []error
	fatal     error // the first worker failure, for Add once all have failed
}

// Addable refuses l when the runner is closed or drives l already. A
// runner calls it before it touches the source's descriptor.
func (f *Front[W]) Addable(l *srcs.Lane) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addableLocked(l)
}

func (f *Front[W]) addableLocked(l *srcs.Lane) error {
	switch {
	case f.closed:
		return fmt.Errorf("%s: add lane %d: %w", f.Name, l.ID, net.ErrClosed)
	case f.table.Has(l):
		return fmt.Errorf("%s: add lane %d: already added", f.Name, l.ID)
	}
	return nil
}

// Place hands l to the least loaded worker still running. try queues the
// lane on w and returns its token; ok false says w stopped since it was
// picked (try undoes what it did), and the next pick passes it over. Place
// fails when the runner closed or took l meanwhile, with try's error, and
// when every worker has stopped: with the first failure, if one was
// recorded (Fail).
func (f *Front[W]) Place(l *srcs.Lane, try func(w W) (tok uint64, ok bool, err error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.addableLocked(l); err != nil {
		return err
	}
	for {
		w, ok := f.table.Pick(f.Workers)
		if !ok {
			if f.fatal == nil {
				return fmt.Errorf("%s: add lane %d: all workers stopped: %w", f.Name, l.ID, net.ErrClosed)
			}
			return fmt.Errorf("%s: add lane %d: all workers stopped: %w", f.Name, l.ID, f.fatal)
		}
		tok, ok, err := try(w)
		if err != nil {
			return err
		}
		if ok {
			f.table.Put(l, w, tok)
			return nil
		}
	}
}

// Lookup returns the worker that drives l and the lane's token there.
func (f *Front[W]) Lookup(l *srcs.Lane) (Ref[W], bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.table.Get(l)
}

// Remove hands l's token to post, for the worker that drives l to stop
// it; it does nothing for a lane the runner does not drive (finished, or
// never added). post runs without the Front's lock held.
func (f *Front[W]) Remove(l *srcs.Lane, post func(w W, tok uint64)) {
	if r, ok := f.Lookup(l); ok {
		post(r.W, r.Tok)
	}
}

// SetPaused sets the runner's pause flag, which its workers check before
// every read, and calls resume for every worker when that ends a pause:
// only resuming has to wake them.
func (f *Front[W]) SetPaused(flag *atomic.Bool, paused bool, resume func(W)) {
	if flag.Swap(paused) == paused || paused {
		return
	}
	for _, w := range f.Workers {
		resume(w)
	}
}

// Forget drops l, which a worker finished under tok, unless it was added
// again meanwhile. Workers call it before they report Finish, so that the
// engine may add the lane again at once.
func (f *Front[W]) Forget(l *srcs.Lane, tok uint64) {
	f.mu.Lock()
	f.table.Forget(l, tok)
	f.mu.Unlock()
}

// Fail records reason as a worker's failure; the first one is what Add
// reports once every worker has stopped.
func (f *Front[W]) Fail(reason error) {
	f.mu.Lock()
	if f.fatal == nil {
		f.fatal = reason
	}
	f.mu.Unlock()
}

// CloseErrs records errors a worker met while it stopped; Close returns
// them.
func (f *Front[W]) CloseErrs(errs ...error) {
	f.mu.Lock()
	f.closeErrs = append(f.closeErrs, errs...)
	f.mu.Unlock()
}

// Close marks the runner closed and, the first time, calls stop for every
// worker. wait then waits for the workers to end. Close returns the errors
// they recorded, and may be called again.
func (f *Front[W]) Close(stop func(W), wait func()) error {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		for _, w := range f.Workers {
			stop(w)
		}
	}
	f.mu.Unlock()
	wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.closeErrs...)
}
