// Flush deadlines of a uring worker's partly filled buffers.

package ring

import "time"

// flushDue flushes the lanes whose deadline has passed or is within its
// slack (flush.Heap.PopDue).
func (w *worker) flushDue(now time.Time) { w.flushes.PopDue(now, w.laneSlack, w.flushDueLane) }

// slack is a lane's flush slack (driver.Lane.FlushSlack).
func (w *worker) slack(ln *lane) time.Duration { return ln.d.FlushSlack() }

// flushDueNow flushes a lane that is due; one with a read in flight
// flushes when the read completes.
func (w *worker) flushDueNow(ln *lane, now time.Time) {
	if ln.op == tagRead {
		ln.flushNow = true
		return
	}
	w.flushLane(ln, now)
}

// flushLane flushes ln's driver: its partial data goes out (for a framed
// lane, its whole records, whose incomplete tail then needs the next
// buffer: the lane is queued to take it; or a short part of a record
// leaves the pool).
func (w *worker) flushLane(ln *lane, now time.Time) {
	ln.d.Flush(now)
	w.settle(ln)
	if ln.d.Cutting() {
		w.enqueue(ln)
	}
}

// nextFlush returns how long until the earliest flush deadline, and false
// when no lane holds partial data.
func (w *worker) nextFlush(now time.Time) (time.Duration, bool) {
	if w.flushes.Len() == 0 {
		return 0, false
	}
	_, due := w.flushes.Min()
	return due.Sub(now), true
}
