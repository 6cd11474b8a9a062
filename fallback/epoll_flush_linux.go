//go:build linux

// Flush deadlines of an epoll worker's partly filled buffers.

package fallback

import "time"

// holdPartial keeps ln in the flush heap, at its current deadline, while
// it holds partial data, and out of it otherwise. A commit that filled one
// buffer and started the next moves the deadline: Fix keeps the heap
// ordered.
func (w *epWorker) holdPartial(ln *epLane) {
	due, ok := ln.f.due()
	switch {
	case !ok:
		w.flushes.Remove(&ln.fl)
	case !ln.fl.In():
		w.flushes.Push(&ln.fl, ln, due)
	case !ln.fl.Due().Equal(due):
		w.flushes.Fix(&ln.fl, due)
	}
}

// flushDue emits the partial data whose flush deadline has passed.
func (w *epWorker) flushDue(now time.Time) {
	for w.flushes.Len() > 0 {
		ln, due := w.flushes.Min()
		if ln.f.flushIfDue(now) {
			w.flushes.Remove(&ln.fl)
			if ln.f.cut && !ln.waiting {
				// The records wait for the buffer their tail moves into.
				w.acquire(ln)
			}
			continue
		}
		if d, ok := ln.f.due(); !ok || !d.Equal(due) {
			// Its data left, or its deadline moved, on a path that did not
			// say so: put it right rather than wake for nothing.
			w.holdPartial(ln)
			continue
		}
		return
	}
}
