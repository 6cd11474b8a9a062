package front

import (
	"sync"
	"sync/atomic"
)

// Mailbox is the part of an event-loop worker that other goroutines
// touch: its command queue, the slots that name its lanes, whether it has
// stopped taking commands, and its load. A command posted after Stop is
// refused, so a worker that stops misses none: Stop hands it the rest.
//
// Mu guards the queue and the slots. A worker holds it, through Post's
// wake or on its own, for what must not race its stop: writing to the
// descriptor that wakes it, or registering a lane's descriptor with it.
// The zero value is ready; SetGenMask bounds the slots' generations. Its
// methods are safe for concurrent use, but for Take and Recycle, which
// belong to the worker.
type Mailbox[C any] struct {
	Mu      sync.Mutex
	cmds    []C
	spare   []C
	stopped atomic.Bool // set under Mu; read without it by Stopped
	slots   Slots
	load    atomic.Int64
}

// SetGenMask bounds the slots' generations (see Slots.Mask). Call it
// before the first AllocSlot.
func (m *Mailbox[C]) SetGenMask(mask uint32) { m.slots.Mask = mask }

// AllocSlot reserves a slot and returns it with its new generation.
func (m *Mailbox[C]) AllocSlot() (idx, gen uint32) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	return m.slots.Alloc()
}

// FreeSlot returns a slot for reuse.
func (m *Mailbox[C]) FreeSlot(idx uint32) {
	m.Mu.Lock()
	m.slots.Free(idx)
	m.Mu.Unlock()
}

// Stopped reports whether the worker takes no more commands (Worker).
func (m *Mailbox[C]) Stopped() bool { return m.stopped.Load() }

// Load returns the lanes assigned to the worker (Worker).
func (m *Mailbox[C]) Load() int64 { return m.load.Load() }

// AddLoad counts n lanes assigned to the worker (negative: gone).
func (m *Mailbox[C]) AddLoad(n int64) { m.load.Add(n) }

// Post queues c and then, still under Mu, calls wake (which may be nil).
// It reports false, queuing nothing, once the worker has stopped. Any
// goroutine may post, the worker itself included (a buffer it releases
// may be granted to one of its own lanes).
func (m *Mailbox[C]) Post(c C, wake func()) bool {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	if m.stopped.Load() {
		return false
	}
	m.PostLocked(c, wake)
	return true
}

// PostLocked is Post for a caller that holds Mu and has checked Stopped.
func (m *Mailbox[C]) PostLocked(c C, wake func()) {
	m.cmds = append(m.cmds, c)
	if wake != nil {
		wake()
	}
}

// Pending reports whether commands are queued.
func (m *Mailbox[C]) Pending() bool {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	return len(m.cmds) > 0
}

// Take returns the queued commands and empties the queue. The worker runs
// them, then gives the slice back with Recycle, so that the queue's two
// buffers take turns and posting allocates nothing in the steady state.
func (m *Mailbox[C]) Take() []C {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	cmds := m.cmds
	m.cmds = m.spare[:0]
	return cmds
}

// Recycle gives back a slice Take returned, after the worker has cleared
// the commands in it.
func (m *Mailbox[C]) Recycle(cmds []C) { m.spare = cmds[:0] }

// Drain runs every queued command, oldest first, through run on the
// worker, clearing each afterwards (so the queue's buffers hold no lane
// or channel of a command already run), and recycles the queue.
func (m *Mailbox[C]) Drain(run func(c *C)) {
	cmds := m.Take()
	var zero C
	for i := range cmds {
		run(&cmds[i])
		cmds[i] = zero
	}
	m.Recycle(cmds)
}

// Stop refuses every later command and returns those still queued; close,
// if not nil, runs under Mu once no post can follow.
func (m *Mailbox[C]) Stop(close func()) []C {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.stopped.Store(true)
	rest := m.cmds
	m.cmds = nil
	if close != nil {
		close()
	}
	return rest
}
