package driver

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// Lane is one lane's buffer in the making: the pool buffer being filled,
// how many bytes of it hold data, when the first of them arrived, and for
// a framed lane its records. It applies the rules every runner shares:
//
//   - emit a buffer when it is full, when a datagram lane's next datagram
//     might not fit, and after every read when the lane may not hold
//     partial data (MaxHold zero);
//   - emit partial data when its flush deadline passes (Due, Flush), and
//     everything held when the lane ends (Finish), never holding an empty
//     buffer past a flush or the lane's end;
//   - for a framed lane, emit whole records only: the incomplete record at
//     the end of a buffer moves into the lane's next one (a cut), a record
//     too long to deliver is skipped or ends the lane as its framer says,
//     and part of a record that waited a flush timeout leaves the pool
//     (parked) so that a slow sender pins no buffer.
//
// A Lane does no I/O, reads no clock (time comes in as now) and knows
// nothing of threads or event loops: a runner decides when to read, into
// Space, and tells the Lane with Commit. It is owned by whichever goroutine
// drives the lane at the moment and is not safe for concurrent use. Its
// zero value is unusable; call Reset first.
type Lane struct {
	l *contract.Lane
	// maxHold is how long partial data may be held: the lane's Flush,
	// unless the runner cannot wake up on time for this lane, in which
	// case it is zero and every read is emitted at once.
	maxHold time.Duration
	buf     *pool.Buf // nil when the lane holds no buffer
	n       int       // bytes of buf that hold data
	first   stamp     // arrival of buf's first byte; zero when n == 0

	// fr is a framed lane's records (nil for raw bytes), dg a datagram
	// lane's limit and drop reporting (nil for a byte stream). Most lanes
	// are raw streams, and an idle one should cost no more than the
	// fields above: runners keep one Lane per connection, thousands of
	// them idle.
	fr *frames
	dg *datagrams

	inv     invariants // before a sized field: a struct ending in an empty one is padded
	emitted int        // chunks emitted since the last Step
}

// datagrams is the state of a datagram lane, whose buffers hold framed
// datagrams.
type datagrams struct {
	limit  int                           // the source's datagram limit (contract.DatagramSizer)
	rep    contract.DatagramDropReporter // l.Out's, if it has one
	warned bool                          // a dropped datagram was logged
}

// Reset binds the Lane to l, holding nothing. maxHold is how long partial
// data may wait (l.Flush, or zero when the runner cannot wake up for it).
func (d *Lane) Reset(l *contract.Lane, maxHold time.Duration) {
	*d = Lane{l: l, maxHold: maxHold}
	if l != nil && l.Framer != nil {
		d.fr = new(frames)
		d.fr.Reset(l)
	}
	d.inv.reset()
}

// ResetDatagram binds the Lane to a datagram lane: each commit is one
// datagram, framed as srcs.ForEachDatagram reads it.
func (d *Lane) ResetDatagram(l *contract.Lane, maxHold time.Duration) {
	d.Reset(l, maxHold)
	d.dg = &datagrams{limit: DatagramLimit(l.Src, math.MaxInt32)} // capped by the buffer in Commit
	d.dg.rep, _ = l.Out.(contract.DatagramDropReporter)
}

// Lane returns the lane the Lane drives.
func (d *Lane) Lane() *contract.Lane { return d.l }

// Framed reports whether the lane is framed into records.
func (d *Lane) Framed() bool { return d.fr != nil }

// Held reports whether the lane holds a buffer, full of data or not.
func (d *Lane) Held() bool { return d.buf != nil }

// Buf returns the buffer the lane holds, or nil.
func (d *Lane) Buf() *pool.Buf { return d.buf }

// Cutting reports whether whole records wait for the lane's next buffer,
// into which their incomplete tail moves: the runner must bring one
// (Hold) before the lane can read again.
func (d *Lane) Cutting() bool { return d.fr != nil && d.fr.cut }

// NeedsBuffer reports whether the lane must take a buffer from its account
// before it can read: it holds none, or it is cutting.
func (d *Lane) NeedsBuffer() bool { return d.buf == nil || d.Cutting() }

// Pending returns the number of bytes held and not yet emitted.
func (d *Lane) Pending() int { return d.n }

// Step is what a step of the lane leaves its runner's loop to act on:
// the chunks emitted since the last Step (a turn's pace counts them) and
// the flush deadline the lane has now (Due), if it has one.
type Step struct {
	Emitted int
	Due     time.Time
	HasDue  bool
}

// Settle returns the lane's Step, for a runner that keeps the lane in a
// flush heap after a step other than Commit (Hold, Flush, a datagram
// batch).
func (d *Lane) Settle() Step {
	st := Step{Emitted: d.emitted}
	d.emitted = 0
	st.Due, st.HasDue = d.Due()
	return st
}

// Hold gives the lane b, a fresh buffer from its account, at now. A
// cutting lane moves the incomplete record into it and emits the whole
// records before it; a lane with a parked part takes the part back.
func (d *Lane) Hold(b *pool.Buf, now time.Time) {
	d.inv.held(b)
	if d.Cutting() {
		d.cutInto(b, now)
		return
	}
	if d.buf != nil {
		// Two buffers for one lane would leak one of them.
		panic("driver: the lane already holds a buffer")
	}
	d.buf, d.n, d.first = b, 0, 0
	if d.fr == nil {
		return
	}
	if n := d.fr.Unpark(b.Bytes()); n > 0 {
		d.n, d.first = n, stampOf(now)
	}
}

// Space returns the free tail of the held buffer, where the next read goes.
// It is never empty: a full buffer is emitted as soon as it fills. For a
// datagram lane it starts after room for the datagram's length prefix, and
// holds at least the lane's datagram limit: a buffer with less room left is
// emitted at once.
func (d *Lane) Space() []byte {
	if d.dg != nil {
		return d.buf.Bytes()[d.n+srcs.DatagramHeaderLen:]
	}
	return d.buf.Bytes()[d.n:]
}

// Commit records that n > 0 bytes were read into Space at now (for a
// datagram lane, a whole datagram of n >= 0 bytes). It emits what the
// rules say. Afterwards the lane may or may not still hold a buffer, and
// a framed lane may be cutting. It returns the lane's Step (Settle), so
// that a runner's loop learns in one call what the read emitted and
// when the lane is due. An error ends the lane: the bytes read could not
// be framed.
func (d *Lane) Commit(n int, now time.Time) (Step, error) {
	err := d.commit(n, now)
	return d.Settle(), err
}

func (d *Lane) commit(n int, now time.Time) error {
	d.inv.live()
	if d.fr != nil {
		return d.commitFramed(n, now)
	}
	if d.n == 0 {
		d.first = stampOf(now)
	}
	if d.dg != nil {
		PutDatagramHeader(d.buf.Bytes()[d.n:], n)
		d.n += srcs.DatagramHeaderLen
	}
	d.n += n
	size := len(d.buf.Bytes())
	switch {
	case d.n == size:
		d.emit(0)
	case d.dg != nil && DatagramSpace(d.buf.Bytes(), d.n) < min(d.dg.limit, size-srcs.DatagramHeaderLen):
		d.emit(srcs.Partial)
	case d.maxHold <= 0:
		d.emit(srcs.Partial)
	}
	return nil
}

// commitFramed is Commit for a framed lane: the records the read completed
// go out when the buffer is full, or at once when the lane holds no
// partial data; the incomplete one stays.
func (d *Lane) commitFramed(n int, now time.Time) error {
	had := d.fr.Done()
	m, err := d.fr.Scan(d.buf.Bytes(), d.n+n)
	d.n = m
	if had == 0 && d.fr.Done() > 0 || d.first == 0 {
		// When the first record was whole, or (none yet) since when
		// part of one waits: see Due.
		d.first = stampOf(now)
	}
	if err != nil {
		d.n = d.fr.Done() // the bad record is dropped; the error says why
		return err
	}
	switch {
	case d.n == len(d.buf.Bytes()):
		d.cutRecords(0, now)
	case d.maxHold <= 0:
		d.cutRecords(srcs.Partial, now)
	case d.n == 0 && d.buf != nil:
		// Everything read was skipped: an idle lane holds no buffer.
		d.release()
	}
	return nil
}

// cutRecords emits the whole records a framed lane holds. When an
// incomplete record follows them, it needs the lane's next buffer first:
// taken now if the account has one, else the cut waits for the runner to
// bring one (Cutting, Hold).
func (d *Lane) cutRecords(flags srcs.Flags, now time.Time) {
	switch done := d.fr.Done(); {
	case done == 0:
	case done == d.n:
		d.fr.Clear()
		d.emit(flags | srcs.Records)
	default:
		d.fr.cut, d.fr.cutFlags = true, flags
		if b, ok := d.l.Account.TryAcquire(); ok {
			d.inv.held(b)
			d.cutInto(b, now)
		}
	}
}

// cutInto moves the incomplete record at the end of the held buffer into
// b, emits the whole records before it, and keeps b.
func (d *Lane) cutInto(b *pool.Buf, now time.Time) {
	done := d.fr.Done()
	t := d.fr.Carry(b.Bytes(), d.buf.Bytes(), d.n)
	old, first, flags := d.buf, d.first, d.fr.cutFlags
	d.buf, d.n, d.first, d.fr.cut, d.fr.cutFlags = b, t, 0, false, 0
	if t > 0 {
		d.first = stampOf(now)
	}
	d.out(old, done, flags|srcs.Records, first.time())
}

// release returns the held buffer, which holds nothing, to the pool.
func (d *Lane) release() {
	b := d.buf
	d.buf = nil
	d.inv.gone(b)
	b.Release()
}

// Drop records a datagram that was longer than Space and so was cut short
// by the kernel: it is not committed, the lane keeps running, and an empty
// buffer goes back to the pool (idle lanes hold none). size is its length,
// or a lower bound. The first drop of a lane is logged, naming runner;
// each is reported to the emitter if it counts them.
func (d *Lane) Drop(size int, log contract.Logger, runner string) {
	d.dropped(size, len(d.Space()), log, runner)
	if d.n == 0 {
		d.release()
	}
}

// dropped logs (the first time) and reports a datagram of size bytes that
// did not fit its room.
func (d *Lane) dropped(size, room int, log contract.Logger, runner string) {
	dg := d.dg
	if dg == nil {
		// Only a datagram read is cut short; a stray Drop is still logged.
		dg = &datagrams{}
	}
	if !dg.warned {
		dg.warned = true
		log.Warn(runner+": dropped a datagram larger than the buffer space (further drops on this lane are not logged)",
			"lane", d.l.ID, "source", d.l.Name(), "size", size, "room", room)
	}
	if dg.rep != nil {
		dg.rep.DatagramDropped(d.l, size)
	}
}

// DatagramBatch says how one receive of several datagrams may fill the
// held buffer of a datagram lane: up to k of them, the i-th into
// Space()[i*stride:][:room], room being the lane's datagram limit and
// stride that plus the next datagram's length prefix, but the last, whose
// room runs to the end of the buffer (as a lone receive's does, so that a
// datagram above the limit that fits there is delivered). Every room lies
// within the buffer, and CommitDatagrams keeps them in place: what it
// commits never reaches a room not yet read. A lane that emits every
// datagram at once takes one at a time (k is 1).
func (d *Lane) DatagramBatch() (room, stride, k int) {
	size := len(d.buf.Bytes())
	room = min(d.dg.limit, size-srcs.DatagramHeaderLen)
	stride = room + srcs.DatagramHeaderLen
	if d.maxHold <= 0 {
		return room, stride, 1
	}
	return room, stride, max(1, (size-d.n)/stride)
}

// Datagrams describes what one receive of several datagrams brought.
type Datagrams interface {
	// Room is the room (of DatagramBatch's) the i-th datagram is in;
	// rooms ascend with i.
	Room(i int) int
	// Size is the i-th datagram's length; it exceeds its room when the
	// datagram was cut short.
	Size(i int) int
	// Truncated reports that the i-th datagram was longer than its room.
	Truncated(i int) bool
}

// CommitDatagrams records the n datagrams one receive (or a batch of
// receives) placed in the rooms DatagramBatch gave, in order, at now: each
// is moved up behind the one before it and committed as Commit does, and
// one cut short is dropped as Drop does. Afterwards the lane may or may not hold a buffer; it holds no
// empty one.
func (d *Lane) CommitDatagrams(n int, got Datagrams, now time.Time, log contract.Logger, runner string) {
	room, stride, _ := d.DatagramBatch()
	rooms := d.Space()
	for i := range n {
		size := got.Size(i)
		if got.Truncated(i) {
			d.dropped(size, room, log, runner)
			continue
		}
		// The rooms before i hold datagrams committed already, each no
		// longer than its room: the copy only ever moves down.
		at := got.Room(i) * stride
		copy(d.Space(), rooms[at:at+size])
		d.commit(size, now) // a datagram lane is never framed: no error
	}
	if d.buf != nil && d.n == 0 {
		d.release()
	}
}

// Due returns when the held partial data must be emitted; ok is false when
// no flush deadline applies: nothing is held, a cut waits for a buffer,
// every read is emitted at once anyway, or a framed lane holds only part
// of a record too long to park, which no flush could move (a deadline that
// no flush can meet would stay in the past, and a runner that waits for
// it would never read again). For a framed lane it is when its whole
// records go out, or when a short part of a record that waited that long
// leaves the pool.
func (d *Lane) Due() (t time.Time, ok bool) {
	if d.n == 0 || d.fr != nil && (d.fr.cut || d.fr.Done() == 0 && d.maxHold <= 0 || !d.fr.Flushable(d.n)) {
		return time.Time{}, false
	}
	return d.first.time().Add(d.maxHold), true
}

// FlushSlack is how early before its deadline (Due) a lane's partial data
// may go out together with others that are due: a runner that wakes for
// one deadline flushes every lane due within its slack, rather than waking
// once for each when every message of a lightly loaded source becomes a
// chunk of its own. Flush bounds how long data is held, so going early is
// always allowed. Every runner uses it.
func (d *Lane) FlushSlack() time.Duration { return d.maxHold / 4 }

// FlushIfDue flushes the lane if its deadline is within FlushSlack of
// now, and reports whether it did.
func (d *Lane) FlushIfDue(now time.Time) bool {
	if due, ok := d.Due(); ok && !now.Before(due.Add(-d.FlushSlack())) {
		d.Flush(now)
		return true
	}
	return false
}

// Flush emits any held data as Partial and returns an empty buffer to the
// pool: afterwards the lane holds no buffer, except a framed lane that
// holds part of a record too long to park, which keeps it, and a cutting
// lane, whose whole records wait with their buffer for the next one.
// Runners call it when a flush deadline passes, and before they pause or
// end a lane.
func (d *Lane) Flush(now time.Time) {
	switch {
	case d.fr != nil && d.n > 0:
		if !d.fr.cut {
			d.cutRecords(srcs.Partial, now)
		}
		if !d.fr.cut && d.n > 0 && d.fr.Done() == 0 && d.maxHold > 0 && d.fr.Park(d.buf.Bytes(), d.n) {
			// Only part of a record, which has waited a flush timeout:
			// a slow sender must not pin a pool buffer.
			d.n, d.first = 0, 0
			d.release()
		}
	case d.n > 0:
		d.emit(srcs.Partial)
	case d.buf != nil:
		d.release()
	}
}

// Idle gives back the buffer of a lane that holds no data: a lane that
// waits for its source holds no buffer, which serves the next waiter
// better.
func (d *Lane) Idle() {
	if d.n == 0 && d.buf != nil {
		d.release()
	}
}

// Abandon forgets the held buffer and the data in it without releasing or
// emitting it, for a runner whose kernel may still write into it: the
// buffer stays charged to the lane's account and is never reused. It
// reports whether there was a buffer.
func (d *Lane) Abandon() bool {
	if d.buf == nil {
		return false
	}
	d.inv.gone(d.buf)
	d.buf, d.n, d.first = nil, 0, 0
	if d.fr != nil {
		d.fr.cut = false
	}
	return true
}

// Finish ends the lane: held data is emitted (for a framed lane, an
// incomplete record at the end too, flagged Truncated), an empty buffer
// returned, a part of a record parked outside the pool delivered, a pool
// wait still pending on the account withdrawn, and Finish reported. The
// runner must not touch the lane, its source or its descriptor afterwards.
func (d *Lane) Finish(err error) {
	if d.fr != nil && d.n > 0 {
		flags := srcs.Partial | recordFlags(d.fr.Done(), d.n)
		d.fr.Clear()
		d.fr.cut = false
		d.emit(flags)
	}
	d.Flush(time.Time{}) // nothing is left that a flush could time
	if d.fr != nil {
		d.fr.EmitParked()
	}
	d.inv.finish()
	d.l.Account.Cancel()
	d.l.Out.Finish(d.l, err)
}

// emit hands the held data downstream; ownership of the buffer goes with it.
func (d *Lane) emit(flags srcs.Flags) {
	b, n, first := d.buf, d.n, d.first
	d.buf, d.n, d.first = nil, 0, 0
	d.out(b, n, flags, first.time())
}

func (d *Lane) out(b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	if d.dg != nil {
		flags |= srcs.Datagrams
	}
	d.inv.live()
	d.inv.gone(b)
	d.emitted++
	d.l.Out.Emit(d.l, b, n, flags, first)
}

// Check rejects a lane a runner could not drive; runner names the runner
// in the error.
func Check(runner string, l *contract.Lane) error {
	switch {
	case l == nil:
		return fmt.Errorf("%s: add: nil lane", runner)
	case l.Src == nil:
		return fmt.Errorf("%s: add lane %d: nil source", runner, l.ID)
	case l.Account == nil:
		return fmt.Errorf("%s: add lane %d: nil account", runner, l.ID)
	case l.Out == nil:
		return fmt.Errorf("%s: add lane %d: nil emitter", runner, l.ID)
	case l.Flush < 0:
		return fmt.Errorf("%s: add lane %d: negative flush timeout %v", runner, l.ID, l.Flush)
	}
	return nil
}

// CheckDescriptor is Check for a runner that reads a lane's kernel
// descriptor: it also returns the source's contract.Descriptor, or an error
// wrapping srcs.ErrNoDescriptor for a source without one.
func CheckDescriptor(runner string, l *contract.Lane) (contract.Descriptor, error) {
	if err := Check(runner, l); err != nil {
		return nil, err
	}
	d, ok := l.Src.(contract.Descriptor)
	if !ok {
		return nil, fmt.Errorf("%s: add lane %d (%s): %w", runner, l.ID, l.Name(), srcs.ErrNoDescriptor)
	}
	return d, nil
}

// stamp is a time as an offset from epoch, on the monotonic clock when
// the time has a reading of it (as time.Time.Sub): 8 bytes where a
// time.Time takes 24, in a struct every connection has one of. Zero
// means none.
type stamp int64

// epoch is what stamps count from.
var epoch = time.Now()

func stampOf(t time.Time) stamp {
	if s := stamp(t.Sub(epoch)); s != 0 {
		return s
	}
	return 1 // zero is none: a nanosecond later
}

// time returns the time s stands for; the zero Time for none.
func (s stamp) time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return epoch.Add(time.Duration(s))
}
