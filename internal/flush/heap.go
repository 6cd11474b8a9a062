package flush

import "time"

// Mark is an item's place in a Heap: embed one in each item. The zero Mark
// is in no heap. Runners embed one in every lane, most of them idle, so it
// keeps its deadline as an offset from the heap's epoch rather than a
// time.Time: 24 bytes instead of 40.
type Mark[T any] struct {
	owner T
	due   time.Duration // the deadline, since the heap's epoch
	idx   int32         // position in the heap plus one; 0: not in it
}

// In reports whether m is in a heap.
func (m *Mark[T]) In() bool { return m.idx > 0 }

// Heap is a binary min-heap of marks by deadline. Not safe for concurrent
// use: it belongs to one worker.
type Heap[T any] struct {
	h []*Mark[T]
	// epoch is what marks' deadlines count from: the first deadline
	// pushed. Deadlines keep their monotonic reading through it.
	epoch time.Time
}

// since returns due as an offset from the epoch, setting the epoch first.
func (h *Heap[T]) since(due time.Time) time.Duration {
	if h.epoch.IsZero() {
		h.epoch = due
	}
	return due.Sub(h.epoch)
}

// Len returns the number of items.
func (h *Heap[T]) Len() int { return len(h.h) }

// Min returns the item with the earliest deadline, and the deadline. The
// heap must not be empty.
func (h *Heap[T]) Min() (T, time.Time) { return h.h[0].owner, h.epoch.Add(h.h[0].due) }

// Push adds owner, whose mark m is in no heap, with deadline due.
func (h *Heap[T]) Push(m *Mark[T], owner T, due time.Time) {
	m.due, m.owner = h.since(due), owner
	h.h = append(h.h, m)
	m.idx = int32(len(h.h))
	h.up(len(h.h) - 1)
}

// Fix moves m, which is in h, to deadline due.
func (h *Heap[T]) Fix(m *Mark[T], due time.Time) {
	m.due = h.since(due)
	i := int(m.idx) - 1
	h.down(i)
	h.up(i)
}

// Set makes m's place in h what a lane's flush deadline says: at due when
// ok (pushed, or moved if it was elsewhere), and out of h when not. It is
// how a runner follows driver.Lane.Due after each step of a lane.
func (h *Heap[T]) Set(m *Mark[T], owner T, due time.Time, ok bool) {
	switch {
	case !ok:
		h.Remove(m)
	case m.idx == 0:
		h.Push(m, owner, due)
	case m.due != h.since(due):
		h.Fix(m, due)
	}
}

// PopDue takes out of h, earliest first, each item whose deadline has
// passed at now or falls within its slack (driver.Lane.FlushSlack: partial
// data may go out early, together with others due, rather than each
// waking its worker on its own), and hands it to flush, which puts it back
// if it keeps a deadline. It is how the uring and epoll workers flush:
// slack and flush are theirs, bound once.
func (h *Heap[T]) PopDue(now time.Time, slack func(T) time.Duration, flush func(T, time.Time)) {
	for len(h.h) > 0 {
		m := h.h[0]
		if now.Before(h.epoch.Add(m.due).Add(-slack(m.owner))) {
			return
		}
		owner := m.owner
		h.Remove(m)
		flush(owner, now)
	}
}

// Remove takes m out of h. Removing a mark in no heap does nothing.
func (h *Heap[T]) Remove(m *Mark[T]) {
	if m.idx == 0 {
		return
	}
	i, last := int(m.idx)-1, len(h.h)-1
	if i != last {
		h.swap(i, last)
	}
	h.h[last] = nil
	h.h = h.h[:last]
	var zero T
	m.idx, m.owner = 0, zero
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h *Heap[T]) less(i, j int) bool { return h.h[i].due < h.h[j].due }

func (h *Heap[T]) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.h[i].idx = int32(i + 1)
	h.h[j].idx = int32(j + 1)
}

func (h *Heap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *Heap[T]) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h.h) {
			return
		}
		m := l
		if r := l + 1; r < len(h.h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}
