//go:build linux

// Flush deadlines of an epoll worker's partly filled buffers.

package fallback

import (
	"time"

	"github.com/sluice-io/sluice/internal/driver"
)

// holdPartial keeps ln in the flush heap at its driver's deadline while it
// has one, and out of it otherwise, after a step other than a commit
// (which returns its Step): see note.
func (w *epWorker) holdPartial(ln *epLane) { w.note(ln, ln.f.Settle()) }

// note acts on a step of ln's driver: it counts the chunks the step
// emitted and keeps ln in the flush heap at the driver's deadline.
func (w *epWorker) note(ln *epLane, st driver.Step) {
	w.pace.Emitted(st.Emitted)
	w.flushes.Set(&ln.fl, ln, st.Due, st.HasDue)
}

// flushDue flushes the lanes whose deadline has passed or is within its
// slack (flush.Heap.PopDue).
func (w *epWorker) flushDue(now time.Time) { w.flushes.PopDue(now, w.laneSlack, w.flushDueLane) }

// slack is a lane's flush slack (driver.Lane.FlushSlack).
func (w *epWorker) slack(ln *epLane) time.Duration { return ln.f.FlushSlack() }

// flushDueNow flushes a lane the heap found due.
func (w *epWorker) flushDueNow(ln *epLane, now time.Time) {
	// The deadline may have moved on a path that did not say so: flush
	// only when the driver agrees, and put the heap right.
	if ln.f.FlushIfDue(now) && ln.f.Cutting() && !ln.waiting {
		// The records wait for the buffer their tail moves into.
		w.acquire(ln)
	}
	w.holdPartial(ln)
}
