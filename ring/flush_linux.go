// Flush deadlines of a uring worker's partly filled buffers.

package ring

import "time"

// flushSlack is how early before its deadline a partial buffer may go out
// with others that are due. Flush bounds how long data is held, so going
// early is always allowed; coalescing lets one wake-up flush every buffer
// due within the slack, instead of a timer wake-up per buffer when each
// message of a lightly loaded source becomes a chunk of its own.
func flushSlack(ln *lane) time.Duration { return ln.lane().Flush / 4 }

// flushDue flushes the lanes whose deadline has passed or is within its
// slack. A lane with a read in flight flushes when the read completes.
func (w *worker) flushDue(now time.Time) {
	for w.flushes.Len() > 0 {
		ln, due := w.flushes.Min()
		if now.Before(due.Add(-flushSlack(ln))) {
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
