// Flush deadlines of a uring worker's partly filled buffers.

package ring

import "time"

// flushDueNow flushes a lane whose deadline has passed or is within its
// slack (driver.Host.FlushDue); one with a read in flight flushes when
// the read completes.
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
	ln.Driver.Flush(now)
	w.host.Settle(ln)
	if ln.Driver.Cutting() {
		w.host.Enqueue(ln)
	}
}
