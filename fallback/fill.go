package fallback

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"golang.org/x/sys/unix"

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

	// dgram is the source's datagram limit (srcs.DatagramSizer) for a
	// datagram lane, whose buffers hold framed datagrams; zero for a byte
	// stream.
	dgram   int
	dropRep srcs.DatagramDropReporter // l.Out's, if it has one
	warned  bool                      // a dropped datagram was logged

	// fr frames a lane with a Framer. cut says buf is emitted up to
	// fr.Done() as soon as the lane holds its next buffer, into which the
	// incomplete tail moves; cutFlags are the flags it goes out with.
	fr       srcs.Frames
	cut      bool
	cutFlags srcs.Flags
}

// reset binds the fill to l, holding nothing.
func (f *fill) reset(l *srcs.Lane, maxHold time.Duration) {
	*f = fill{l: l, maxHold: maxHold}
	f.fr.Reset(l)
}

// resetDatagram binds the fill to a datagram lane: each commit is one
// datagram, framed as srcs.ForEachDatagram reads it.
func (f *fill) resetDatagram(l *srcs.Lane, maxHold time.Duration) {
	f.reset(l, maxHold)
	f.dgram = srcs.DatagramLimit(l.Src, math.MaxInt32) // capped by the buffer in commit
	f.dropRep, _ = l.Out.(srcs.DatagramDropReporter)
}

// held reports whether the lane holds a buffer, full of data or not.
func (f *fill) held() bool { return f.buf != nil }

// needsBuffer reports whether the lane must take a buffer from its account
// before it can read: it holds none, or a framed lane must move the
// incomplete record at the end of its buffer into the next one.
func (f *fill) needsBuffer() bool { return f.buf == nil || f.cut }

// pending returns the number of bytes held and not yet emitted.
func (f *fill) pending() int { return f.n }

// hold gives the lane a fresh buffer from its account. A framed lane
// waiting to cut its buffer moves the incomplete record into it and emits
// the whole records before it.
func (f *fill) hold(b *pool.Buf) {
	if f.cut {
		f.cutInto(b)
		return
	}
	if f.buf != nil {
		// Two buffers for one lane would leak one of them.
		panic("fallback: fill already holds a buffer")
	}
	f.buf, f.n, f.first = b, 0, time.Time{}
	if n := f.fr.Unpark(b.Bytes()); n > 0 {
		f.n, f.first = n, time.Now()
	}
}

// space returns the free tail of the held buffer, where the next read goes.
// It is never empty: a full buffer is emitted as soon as it fills. For a
// datagram lane it starts after room for the datagram's length prefix, and
// holds at least the lane's datagram limit: a buffer with less room left is
// emitted at once.
func (f *fill) space() []byte {
	if f.dgram > 0 {
		return f.buf.Bytes()[f.n+srcs.DatagramHeaderLen:]
	}
	return f.buf.Bytes()[f.n:]
}

// commit records that n > 0 bytes were read into space at now (for a
// datagram lane, a whole datagram of n >= 0 bytes). It emits the buffer
// when it is full (for datagrams: has less room left than the next
// datagram may need), or when the lane does not hold partial data.
// Afterwards the lane may or may not still hold a buffer, and a framed
// lane may need one (needsBuffer). An error ends the lane: the bytes read
// could not be framed.
func (f *fill) commit(n int, now time.Time) error {
	if f.fr.On() {
		return f.commitFramed(n, now)
	}
	if f.n == 0 {
		f.first = now
	}
	if f.dgram > 0 {
		srcs.PutDatagramHeader(f.buf.Bytes()[f.n:], n)
		f.n += srcs.DatagramHeaderLen
	}
	f.n += n
	size := len(f.buf.Bytes())
	switch {
	case f.n == size:
		f.emit(0)
	case f.dgram > 0 && srcs.DatagramSpace(f.buf.Bytes(), f.n) < min(f.dgram, size-srcs.DatagramHeaderLen):
		f.emit(srcs.Partial)
	case f.maxHold <= 0:
		f.emit(srcs.Partial)
	}
	return nil
}

// commitFramed is commit for a framed lane: the records the read completed
// go out when the buffer is full, or at once when the lane holds no
// partial data; the incomplete one stays.
func (f *fill) commitFramed(n int, now time.Time) error {
	had := f.fr.Done()
	m, err := f.fr.Scan(f.buf.Bytes(), f.n+n)
	f.n = m
	if had == 0 && f.fr.Done() > 0 || f.first.IsZero() {
		// When the first record was whole, or (none yet) since when
		// part of one waits: see due.
		f.first = now
	}
	if err != nil {
		f.n = f.fr.Done() // the bad record is dropped; the error says why
		return err
	}
	switch {
	case f.n == len(f.buf.Bytes()):
		f.cutRecords(0)
	case f.maxHold <= 0:
		f.cutRecords(srcs.Partial)
	case f.n == 0 && f.buf != nil:
		// Everything read was skipped: an idle lane holds no buffer.
		f.release()
	}
	return nil
}

// cutRecords emits the whole records a framed lane holds. When an
// incomplete record follows them, it needs the lane's next buffer first:
// taken now if the account has one, else the cut waits for the runner to
// bring one (needsBuffer, hold).
func (f *fill) cutRecords(flags srcs.Flags) {
	switch done := f.fr.Done(); {
	case done == 0:
	case done == f.n:
		f.fr.Clear()
		f.emit(flags | srcs.Records)
	default:
		f.cut, f.cutFlags = true, flags
		if b, ok := f.l.Account.TryAcquire(); ok {
			f.cutInto(b)
		}
	}
}

// cutInto moves the incomplete record at the end of the held buffer into
// b, emits the whole records before it, and keeps b.
func (f *fill) cutInto(b *pool.Buf) {
	done := f.fr.Done()
	t := f.fr.Carry(b.Bytes(), f.buf.Bytes(), f.n)
	old, first, flags := f.buf, f.first, f.cutFlags
	f.buf, f.n, f.first, f.cut, f.cutFlags = b, t, time.Time{}, false, 0
	if t > 0 {
		f.first = time.Now()
	}
	f.l.Out.Emit(f.l, old, done, flags|srcs.Records, first)
}

// release returns the held buffer, which holds nothing, to the pool.
func (f *fill) release() {
	b := f.buf
	f.buf = nil
	b.Release()
}

// drop records a datagram that was longer than space and so was cut short
// by the kernel: it is not committed, the lane keeps running, and an empty
// buffer goes back to the pool (idle lanes hold none). size is its length,
// or a lower bound. The first drop of a lane is logged; each is reported to
// the emitter if it counts them.
func (f *fill) drop(size int, log *slog.Logger, runner string) {
	if !f.warned {
		f.warned = true
		log.Warn("fallback: "+runner+": dropped a datagram larger than the buffer space (further drops on this lane are not logged)",
			"lane", f.l.ID, "source", f.l.Name(), "size", size, "room", len(f.space()))
	}
	if f.dropRep != nil {
		f.dropRep.DatagramDropped(f.l, size)
	}
	if f.n == 0 {
		f.flush()
	}
}

// due returns when the held partial data must be emitted; ok is false when
// no data is held, so no flush deadline applies. For a framed lane it is
// when its whole records go out, or when part of a record that waited that
// long leaves the pool (flush, Frames.Park); none while a cut waits for a
// buffer, none for part of a record when every read is emitted, and none
// for part of a record too long to park (Frames.Flushable): a deadline
// that no flush can meet would stay in the past, and a runner that waits
// for it would never read again.
func (f *fill) due() (t time.Time, ok bool) {
	if f.n == 0 || f.fr.On() && (f.cut || f.fr.Done() == 0 && f.maxHold <= 0 || !f.fr.Flushable(f.n)) {
		return time.Time{}, false
	}
	return f.first.Add(f.maxHold), true
}

// flushIfDue emits held partial data if its deadline has passed at now, and
// reports whether it did.
func (f *fill) flushIfDue(now time.Time) bool {
	if due, ok := f.due(); ok && !now.Before(due) {
		f.flush()
		return true
	}
	return false
}

// flush emits any held data as Partial and returns an empty buffer to the
// pool: afterwards the lane holds no buffer, except a framed lane that
// holds part of a record, which keeps it, and keeps its buffer while the
// whole records before it wait for the next. Runners call it when a flush
// deadline passes, and before they pause or end a lane.
func (f *fill) flush() {
	switch {
	case f.fr.On() && f.n > 0:
		if !f.cut {
			f.cutRecords(srcs.Partial)
		}
		if !f.cut && f.n > 0 && f.fr.Done() == 0 && f.maxHold > 0 && f.fr.Park(f.buf.Bytes(), f.n) {
			// Only part of a record, which has waited a flush timeout:
			// a slow sender must not pin a pool buffer.
			f.n, f.first = 0, time.Time{}
			f.release()
		}
	case f.n > 0:
		f.emit(srcs.Partial)
	case f.buf != nil:
		f.release()
	}
}

// finish ends the lane: held data is emitted (for a framed lane, an
// incomplete record at the end too, flagged Truncated), an empty buffer
// returned, a pool wait still pending on the account withdrawn, and Finish
// reported. The runner must not touch the lane's source or descriptor
// afterwards.
func (f *fill) finish(err error) {
	if f.fr.On() && f.n > 0 {
		flags := srcs.Partial | srcs.RecordFlags(f.fr.Done(), f.n)
		f.fr.Clear()
		f.cut = false
		f.emit(flags)
	}
	f.flush()
	f.fr.EmitParked()
	f.l.Account.Cancel()
	f.l.Out.Finish(f.l, err)
}

// emit hands the held data downstream; ownership of the buffer goes with it.
func (f *fill) emit(flags srcs.Flags) {
	if f.dgram > 0 {
		flags |= srcs.Datagrams
	}
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

// datagramFlags are the recvmsg flags of the descriptor runners. MSG_TRUNC
// makes the kernel return a datagram's real length even when it was longer
// than the buffer, so a truncated datagram shows as n > len(p), and as the
// returned MSG_TRUNC flag on systems that ignore the request.
const datagramFlags = unix.MSG_TRUNC | unix.MSG_DONTWAIT

// recvDatagram receives one datagram from a non-blocking or readable
// socket into p. n is its length; truncated reports that it did not fit p
// and is lost. The sender's address is not kept, but x/sys/unix converts
// it anyway: a small allocation or two per datagram on the epoll and thread
// runners (the ring runner allocates nothing).
func recvDatagram(fd int, p []byte) (n int, truncated bool, err error) {
	n, _, flags, _, err := unix.Recvmsg(fd, p, nil, datagramFlags)
	return n, n > len(p) || flags&unix.MSG_TRUNC != 0, err
}

// checkDatagramSocket checks that a Datagram descriptor is a SOCK_DGRAM
// socket: a stream socket would lose data to MSG_TRUNC, and a seqpacket
// one ends with a zero-length read, which a datagram lane takes for an
// empty datagram.
func checkDatagramSocket(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	switch {
	case err == unix.ENOTSOCK:
		return fmt.Errorf("datagram descriptor %d: %w", fd, unix.ENOTSOCK)
	case err != nil:
		return fmt.Errorf("datagram descriptor %d: %w", fd, os.NewSyscallError("getsockopt", err))
	case typ != unix.SOCK_DGRAM:
		return fmt.Errorf("datagram descriptor %d is a socket of type %d, not SOCK_DGRAM: %w", fd, typ, unix.EPROTOTYPE)
	}
	return nil
}
