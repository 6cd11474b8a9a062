// Flush deadlines of a uring worker's partly filled buffers.

package ring

import "time"

// flushDue flushes the lanes whose deadline has passed or is within its
// slack (driver.Lane.FlushSlack). A lane with a read in flight flushes
// when the read completes.
func (w *worker) flushDue(now time.Time) {
	for w.flushes.Len() > 0 {
		ln, due := w.flushes.Min()
		if now.Before(due.Add(-ln.d.FlushSlack())) {
			return
		}
		w.flushes.Remove(&ln.fl)
		if ln.op == tagRead {
			ln.flushNow = true
			continue
		}
		w.flushLane(ln, now)
	}
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
