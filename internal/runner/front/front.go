package front

import (
	"errors"
	"fmt"
	"iter"
	"math/bits"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
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
	Ops     Ops[W]

	Paused  atomic.Bool  // the flag the workers check before every read
	Lanes   atomic.Int64 // lanes driven now
	Threads atomic.Int64 // OS threads the workers hold locked

	mu        sync.Mutex
	closed    bool
	table     Table[W]
	closeErrs []error
	fatal     error // the first worker failure, for Add once all have failed
}

// Addable refuses l when the runner is closed or drives l already. A
// runner calls it before it touches the source's descriptor.
func (f *Front[W]) Addable(l *contract.Lane) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addableLocked(l)
}

func (f *Front[W]) addableLocked(l *contract.Lane) error {
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
func (f *Front[W]) Place(l *contract.Lane, try func(w W) (tok uint64, ok bool, err error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.addableLocked(l); err != nil {
		return err
	}
	for {
		i, ok := f.table.pick(f.Workers)
		if !ok {
			if f.fatal == nil {
				return fmt.Errorf("%s: add lane %d: all workers stopped: %w", f.Name, l.ID, net.ErrClosed)
			}
			return fmt.Errorf("%s: add lane %d: all workers stopped: %w", f.Name, l.ID, f.fatal)
		}
		tok, ok, err := try(f.Workers[i])
		if err != nil {
			return err
		}
		if ok {
			f.table.Put(l, i, tok)
			return nil
		}
	}
}

// PlaceOn is Place for a lane only w can drive (a connection w accepted
// into its own file table). It fails when w has stopped.
func (f *Front[W]) PlaceOn(l *contract.Lane, w W, try func(w W) (tok uint64, ok bool, err error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.addableLocked(l); err != nil {
		return err
	}
	i := slices.Index(f.Workers, w)
	if i < 0 || w.Stopped() {
		return fmt.Errorf("%s: add lane %d: its worker stopped: %w", f.Name, l.ID, net.ErrClosed)
	}
	tok, ok, err := try(w)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%s: add lane %d: its worker stopped: %w", f.Name, l.ID, net.ErrClosed)
	}
	f.table.Put(l, i, tok)
	return nil
}

// Closed reports whether Close was called.
func (f *Front[W]) Closed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// Lookup returns the worker that drives l and the lane's token there.
func (f *Front[W]) Lookup(l *contract.Lane) (Ref[W], bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.table.Get(l, f.Workers)
}

// Forget drops l, which a worker finished under tok, unless it was added
// again meanwhile. Workers call it before they report Finish, so that the
// engine may add the lane again at once.
func (f *Front[W]) Forget(l *contract.Lane, tok uint64) {
	f.mu.Lock()
	f.table.Forget(l, tok)
	f.mu.Unlock()
}

// Finished gives back what a lane that worker m finished under tok held:
// its slot, its share of m's load, its count among the front's lanes and
// its entry in the lane table (Forget). The worker calls it once the lane
// is cleared and before it reports Finish, so that the engine may add the
// lane again at once.
func (f *Front[W]) Finished(m interface {
	FreeSlot(idx uint32)
	AddLoad(n int64)
}, l *contract.Lane, tok uint64) {
	idx, _ := driver.SplitToken(tok)
	m.FreeSlot(idx)
	m.AddLoad(-1)
	f.Lanes.Add(-1)
	f.Forget(l, tok)
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

// Op is what a Control asks of a worker.
type Op uint8

const (
	OpRemove Op = iota // stop driving the lane under a token
	OpResume           // a pause ended: read again
	OpStop             // finish every lane and exit
)

// Ops is what a runner does for its Control that is its own: how it posts
// an Op to a worker, how it waits for the workers to end, and one
// worker's counters.
type Ops[W any] struct {
	Runner string // the runner's name, as in its Stats
	Post   func(w W, op Op, tok uint64)
	Wait   func()
	Stats  func(w W) contract.RunnerStats
}

// Control is the half of the engine's runner interface that every
// event-loop runner has alike: Remove, SetPaused, Close and Stats. A
// runner embeds the one its Front returns.
type Control[W interface {
	comparable
	Worker
}] struct{ f *Front[W] }

// Control returns f's Control. f's Ops must be set.
func (f *Front[W]) Control() Control[W] { return Control[W]{f} }

// Remove asks l's worker to stop driving it: held data is emitted as
// Partial and Finish(l, srcs.ErrStopped) follows on the worker. It does
// not wait, and is a no-op for a lane that has finished or was never
// added.
func (c Control[W]) Remove(l *contract.Lane) {
	if r, ok := c.f.Lookup(l); ok {
		c.f.Ops.Post(r.W, OpRemove, r.Tok)
	}
}

// SetPaused stops (true) or resumes (false) reading on every lane: it
// sets the flag the workers check before every read, and wakes every
// worker when a pause ends (only resuming has to wake them). Paused
// workers still run commands, take granted buffers and emit partial data
// at its flush deadline, and Remove and Close still work.
func (c Control[W]) SetPaused(paused bool) {
	if c.f.Paused.Swap(paused) == paused || paused {
		return
	}
	for _, w := range c.f.Workers {
		c.f.Ops.Post(w, OpResume, 0)
	}
}

// Close finishes every lane with srcs.ErrStopped, stops the workers
// (the first time) and waits for them to end. It returns the errors they
// recorded, and may be called again.
func (c Control[W]) Close() error {
	f := c.f
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		for _, w := range f.Workers {
			f.Ops.Post(w, OpStop, 0)
		}
	}
	f.mu.Unlock()
	f.Ops.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.closeErrs...)
}

// Name returns the runner's name, as in its Stats.
func (c Control[W]) Name() string { return c.f.Ops.Runner }

// Stats returns the runner's counters summed over its workers.
func (c Control[W]) Stats() contract.RunnerStats {
	f := c.f
	st := contract.RunnerStats{Runner: f.Ops.Runner, Workers: len(f.Workers),
		Threads: int(f.Threads.Load()), Lanes: int(f.Lanes.Load())}
	for _, w := range f.Workers {
		ws := f.Ops.Stats(w)
		// A worker reports its counters; the runner counts its threads
		// and lanes.
		ws.Workers, ws.Threads, ws.Lanes = 0, 0, 0
		st = st.Add(ws)
	}
	return st
}

// slabBytes is about how much a Slab allocates at once: a size class of
// Go's allocator, so that a slab of lane states wastes little of it.
const slabBytes = 16 << 10

// Slab holds a worker's lane states by slot index. A slot's state is
// allocated once, with its slab, and reused by every lane that holds the
// slot after it; a slab lives as long as the worker. States come in
// slabs of a power of two of them, about slabBytes each, so that a worker
// with thousands of lanes pays neither a size class rounding nor a
// pointer per lane. The states of a slab's unused slots are zero values,
// which the runners tell from a lane's by its generation (never 0). The
// zero value is ready.
type Slab[T any] struct {
	slabs [][]T
	shift uint // log2 of the states per slab; set by the first Get
}

// Get returns the state of slot idx, making its slab if need be.
func (s *Slab[T]) Get(idx uint32) *T {
	if len(s.slabs) == 0 {
		per := max(1, slabBytes/max(1, int(reflect.TypeFor[T]().Size())))
		s.shift = uint(bits.Len(uint(per)) - 1)
	}
	i := int(idx >> s.shift)
	for i >= len(s.slabs) {
		s.slabs = append(s.slabs, nil)
	}
	if s.slabs[i] == nil {
		s.slabs[i] = make([]T, 1<<s.shift)
	}
	return &s.slabs[i][idx&(1<<s.shift-1)]
}

// Lookup returns the state of slot idx, or nil if its slab was never made.
func (s *Slab[T]) Lookup(idx uint32) *T {
	if i := int(idx >> s.shift); i < len(s.slabs) && s.slabs[i] != nil {
		return &s.slabs[i][idx&(1<<s.shift-1)]
	}
	return nil
}

// All yields every state of the slabs made, used slots or not, in slot
// order.
func (s *Slab[T]) All() iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for _, slab := range s.slabs {
			for i := range slab {
				if !yield(&slab[i]) {
					return
				}
			}
		}
	}
}
