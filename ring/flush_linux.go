// Flush deadlines of a uring worker's partly filled buffers.

package ring

import (
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// flushSlack is how early before its deadline a partial buffer may go out
// with others that are due. Flush bounds how long data is held, so going
// early is always allowed; coalescing lets one wake-up flush every buffer
// due within the slack, instead of a timer wake-up per buffer when each
// message of a lightly loaded source becomes a chunk of its own.
func flushSlack(ln *lane) time.Duration { return ln.l.Flush / 4 }

// holdPartial puts ln, which just took its first byte into a buffer it
// keeps (for a framed lane: its first whole record, or part of one), in
// the flush heap. A framed lane holding only part of a record too long to
// park has nothing a flush could move (srcs.Frames.Flushable), so it gets
// no deadline until a read completes the record.
func (w *worker) holdPartial(ln *lane) {
	if ln.fl.In() {
		return // an earlier deadline stands
	}
	if ln.fr.On() && !ln.fr.Flushable(ln.n) {
		return
	}
	w.flushes.Push(&ln.fl, ln, ln.first.Add(ln.l.Flush))
}

// flushDue emits the partial data whose flush deadline has passed or is
// within its slack. A lane with a read in flight emits when the read
// completes.
func (w *worker) flushDue(now time.Time) {
	for w.flushes.Len() > 0 {
		ln, due := w.flushes.Min()
		if now.Before(due.Add(-flushSlack(ln))) {
			return
		}
		if ln.op == tagRead {
			w.flushes.Remove(&ln.fl)
			ln.flushNow = true
			continue
		}
		w.flushLane(ln)
	}
}

// flushLane emits the partial data ln holds: all of it, or for a framed
// lane its whole records, whose incomplete tail then needs the next buffer
// (the lane is queued to take it).
func (w *worker) flushLane(ln *lane) {
	switch {
	case ln.fr.On():
		w.flushes.Remove(&ln.fl)
		if ln.n > 0 && !ln.cut {
			w.cutRecords(ln, srcs.Partial)
		}
		if ln.cut {
			w.enqueue(ln)
		}
		w.park(ln)
	case ln.n > 0:
		w.emit(ln, srcs.Partial)
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
