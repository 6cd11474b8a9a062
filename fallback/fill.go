package fallback

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// fill is one lane's buffer in the making: the pool buffer being filled,
// how many bytes of it hold data, and when the first of them arrived. It
// applies the emit rules every runner shares (emit when full, emit after
// every read when the flush timeout is zero, emit partial data when the
// timeout passes or the lane ends, never hold an empty buffer past the
// lane's end), so each runner only decides when to read and when to wait.
//
// A fill does no I/O and knows nothing of threads or event loops: it is
// owned by whichever goroutine drives the lane at the moment and is not safe
// for concurrent use. Its zero value is unusable; call reset first.
type fill struct {
	l *srcs.Lane
	// maxHold is how long partial data may be held. It is l.Flush unless the
	// runner cannot wake up on time for this lane, in which case it is zero
	// and every read is emitted at once.
	maxHold time.Duration
	buf     *pool.Buf // nil when the lane holds no buffer
	n       int       // bytes of buf that hold data
	first   time.Time // arrival of buf's first byte; zero when n == 0
}

// reset binds the fill to l, holding nothing.
func (f *fill) reset(l *srcs.Lane, maxHold time.Duration) {
	*f = fill{l: l, maxHold: maxHold}
}

// held reports whether the lane holds a buffer, full of data or not.
func (f *fill) held() bool { return f.buf != nil }

// pending returns the number of bytes held and not yet emitted.
func (f *fill) pending() int { return f.n }

// hold gives the lane a fresh buffer from its account.
func (f *fill) hold(b *pool.Buf) {
	if f.buf != nil {
		// Two buffers for one lane would leak one of them.
		panic("fallback: fill already holds a buffer")
	}
	f.buf, f.n, f.first = b, 0, time.Time{}
}

// space returns the free tail of the held buffer, where the next read goes.
// It is never empty: a full buffer is emitted as soon as it fills.
func (f *fill) space() []byte { return f.buf.Bytes()[f.n:] }

// commit records that n > 0 bytes were read into space at now. It emits the
// buffer when it is full, or when the lane does not hold partial data.
// Afterwards the lane may or may not still hold a buffer.
func (f *fill) commit(n int, now time.Time) {
	if f.n == 0 {
		f.first = now
	}
	f.n += n
	switch {
	case f.n == len(f.buf.Bytes()):
		f.emit(0)
	case f.maxHold <= 0:
		f.emit(srcs.Partial)
	}
}

// due returns when the held partial data must be emitted; ok is false when
// no data is held, so no flush deadline applies.
func (f *fill) due() (t time.Time, ok bool) {
	if f.n == 0 {
		return time.Time{}, false
	}
	return f.first.Add(f.maxHold), true
}

// flushIfDue emits held partial data if its deadline has passed at now, and
// reports whether it did.
func (f *fill) flushIfDue(now time.Time) bool {
	if due, ok := f.due(); ok && !now.Before(due) {
		f.emit(srcs.Partial)
		return true
	}
	return false
}

// flush emits any held data as Partial and returns an empty buffer to the
// pool: afterwards the lane holds no buffer. Runners call it when a flush
// deadline passes, and before they pause or end a lane.
func (f *fill) flush() {
	switch {
	case f.n > 0:
		f.emit(srcs.Partial)
	case f.buf != nil:
		b := f.buf
		f.buf = nil
		b.Release()
	}
}

// finish ends the lane: held data is emitted, an empty buffer returned, a
// pool wait still pending on the account withdrawn, and Finish reported. The
// runner must not touch the lane's source or descriptor afterwards.
func (f *fill) finish(err error) {
	f.flush()
	f.l.Account.Cancel()
	f.l.Out.Finish(f.l, err)
}

// emit hands the held data downstream; ownership of the buffer goes with it.
func (f *fill) emit(flags srcs.Flags) {
	b, n, first := f.buf, f.n, f.first
	f.buf, f.n, f.first = nil, 0, time.Time{}
	f.l.Out.Emit(f.l, b, n, flags, first)
}

// checkLane rejects a lane a runner could not drive; runner names the
// runner in the error.
func checkLane(runner string, l *srcs.Lane) error {
	switch {
	case l == nil:
		return fmt.Errorf("fallback: %s: add: nil lane", runner)
	case l.Src == nil:
		return fmt.Errorf("fallback: %s: add lane %d: nil source", runner, l.ID)
	case l.Account == nil:
		return fmt.Errorf("fallback: %s: add lane %d: nil account", runner, l.ID)
	case l.Out == nil:
		return fmt.Errorf("fallback: %s: add lane %d: nil emitter", runner, l.ID)
	case l.Flush < 0:
		return fmt.Errorf("fallback: %s: add lane %d: negative flush timeout %v", runner, l.ID, l.Flush)
	}
	return nil
}

// errDatagram is wrapped by runners that cannot read datagram sockets yet.
var errDatagram = fmt.Errorf("datagram sources are not supported yet: %w", errors.ErrUnsupported)
