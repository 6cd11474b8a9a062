// The flush heap: a worker's lanes ordered by the deadline of the partly
// filled buffer each holds, so that the worker finds the next deadline in
// O(1) and lanes join, leave or move in O(log n).

package driver

import "time"

// FlushMark is an item's place in a FlushHeap: embed one in each item. The
// zero FlushMark is in no heap. A worker keeps one in every lane's Seat,
// most of them idle, so it keeps its deadline as an offset from the heap's
// epoch rather than a time.Time: 24 bytes instead of 40.
type FlushMark[T any] struct {
	owner T
	due   time.Duration // the deadline, since the heap's epoch
	idx   int32         // position in the heap plus one; 0: not in it
}

// In reports whether m is in a heap.
func (m *FlushMark[T]) In() bool { return m.idx > 0 }

// FlushHeap is a binary min-heap of marks by deadline. Not safe for
// concurrent use: it belongs to one worker.
type FlushHeap[T any] struct {
	h []*FlushMark[T]
	// epoch is what marks' deadlines count from: the first deadline
	// pushed. Deadlines keep their monotonic reading through it.
	epoch time.Time
}

// since returns due as an offset from the epoch, setting the epoch first.
func (h *FlushHeap[T]) since(due time.Time) time.Duration {
	if h.epoch.IsZero() {
		h.epoch = due
	}
	return due.Sub(h.epoch)
}

// Len returns the number of items.
func (h *FlushHeap[T]) Len() int { return len(h.h) }

// Min returns the item with the earliest deadline, and the deadline. The
// heap must not be empty.
func (h *FlushHeap[T]) Min() (T, time.Time) { return h.h[0].owner, h.epoch.Add(h.h[0].due) }

// Push adds owner, whose mark m is in no heap, with deadline due.
func (h *FlushHeap[T]) Push(m *FlushMark[T], owner T, due time.Time) {
	m.due, m.owner = h.since(due), owner
	h.h = append(h.h, m)
	m.idx = int32(len(h.h))
	h.up(len(h.h) - 1)
}

// Fix moves m, which is in h, to deadline due.
func (h *FlushHeap[T]) Fix(m *FlushMark[T], due time.Time) {
	m.due = h.since(due)
	i := int(m.idx) - 1
	h.down(i)
	h.up(i)
}

// Set makes m's place in h what a lane's flush deadline says: at due when
// ok (pushed, or moved if it was elsewhere), and out of h when not. It is
// how a runner follows driver.Lane.Due after each step of a lane.
func (h *FlushHeap[T]) Set(m *FlushMark[T], owner T, due time.Time, ok bool) {
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
func (h *FlushHeap[T]) PopDue(now time.Time, slack func(T) time.Duration, flush func(T, time.Time)) {
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
func (h *FlushHeap[T]) Remove(m *FlushMark[T]) {
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

func (h *FlushHeap[T]) less(i, j int) bool { return h.h[i].due < h.h[j].due }

func (h *FlushHeap[T]) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.h[i].idx = int32(i + 1)
	h.h[j].idx = int32(j + 1)
}

func (h *FlushHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *FlushHeap[T]) down(i int) {
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
