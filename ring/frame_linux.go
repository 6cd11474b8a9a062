// How a uring worker frames a lane into records (srcs.Frames): chunks end
// on record boundaries, and the incomplete record at the end of a buffer
// moves into the lane's next one.

package ring

import (
	"time"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// commitFramed is commit for a framed lane: the records the read completed
// go out when the buffer is full, or at once when the lane holds no partial
// data; the incomplete one stays.
func (w *worker) commitFramed(ln *lane, n int) error {
	had := ln.fr.Done()
	m, err := ln.fr.Scan(ln.buf.Bytes(), ln.n+n)
	ln.n = m
	if had == 0 && ln.fr.Done() > 0 || ln.first.IsZero() {
		// When the first record was whole, or (none yet) since when
		// part of one waits: after Flush it leaves the pool (flushLane).
		ln.first = time.Now()
	}
	if err != nil {
		ln.n = ln.fr.Done() // the bad record is dropped; the error says why
		return err
	}
	switch {
	case ln.n == len(ln.buf.Bytes()):
		w.cutRecords(ln, 0)
	case ln.l.Flush <= 0:
		w.cutRecords(ln, srcs.Partial)
	case ln.n > 0 && !ln.fl.In():
		w.holdPartial(ln)
	}
	return nil
}

// cutRecords emits the whole records ln holds. When an incomplete record
// follows them, it needs the lane's next buffer first: taken now if the
// account has one, else when the lane advances (advance, acquire).
func (w *worker) cutRecords(ln *lane, flags srcs.Flags) {
	switch done := ln.fr.Done(); {
	case done == 0:
	case done == ln.n:
		ln.fr.Clear()
		w.emit(ln, flags|srcs.Records)
	default:
		w.flushes.Remove(&ln.fl)
		ln.cut, ln.cutFlags = true, flags
		if b, ok := ln.l.Account.TryAcquire(); ok {
			w.cutInto(ln, b)
		}
	}
}

// take gives ln the buffer b from its account: a fresh one, or the one a
// pending cut moves its incomplete record into.
func (w *worker) take(ln *lane, b *pool.Buf) {
	if ln.cut {
		w.cutInto(ln, b)
		return
	}
	ln.buf, ln.n = b, 0
	if n := ln.fr.Unpark(b.Bytes()); n > 0 {
		ln.n, ln.first = n, time.Now()
		w.holdPartial(ln)
	}
}

// cutInto moves the incomplete record at the end of ln's buffer into b,
// emits the whole records before it, and keeps b.
func (w *worker) cutInto(ln *lane, b *pool.Buf) {
	done := ln.fr.Done()
	t := ln.fr.Carry(b.Bytes(), ln.buf.Bytes(), ln.n)
	old, first, flags := ln.buf, ln.first, ln.cutFlags
	ln.buf, ln.n, ln.first, ln.cut, ln.cutFlags = b, t, time.Time{}, false, 0
	if t > 0 && ln.l.Flush > 0 {
		ln.first = time.Now()
		w.holdPartial(ln)
	}
	ln.l.Out.Emit(ln.l, old, done, flags|srcs.Records, first)
	w.unyielded++
}

// park gives back the buffer of a framed lane that has held part of a
// record, and no whole one, for a flush timeout: a slow sender must not
// pin a pool buffer. The part waits outside the pool (srcs.Frames.Park)
// until the lane's next buffer.
func (w *worker) park(ln *lane) {
	if ln.cut || ln.n == 0 || ln.fr.Done() != 0 || ln.l.Flush <= 0 || !ln.fr.Park(ln.buf.Bytes(), ln.n) {
		return
	}
	w.flushes.Remove(&ln.fl)
	b := ln.buf
	ln.buf, ln.n, ln.first = nil, 0, time.Time{}
	b.Release()
}

// prepSeqRead prepares the read of a framed file lane into space, the free
// tail of its buffer: a READ_FIXED when the buffer is registered with the
// ring, else a READ.
func (w *worker) prepSeqRead(s *SQE, ln *lane, space []byte) {
	if idx := ln.buf.Index(); w.fixed && idx < len(w.iovs) && w.iovs[idx].Base == &ln.buf.Bytes()[0] {
		s.PrepReadFixed(ln.fd, space, uint64(ln.off), uint16(idx))
	} else {
		s.PrepRead(ln.fd, space, uint64(ln.off))
	}
}
