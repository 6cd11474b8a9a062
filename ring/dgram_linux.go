// How a uring worker receives datagrams: several RECVMSGs at a time into
// the rooms of one buffer, committed in order.

package ring

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/driver"
)

// dgramDepth is the most RECVMSGs a datagram lane issues in one turn, each
// into a room of its buffer (driver.Lane.DatagramBatch). One at a time, a
// busy socket cost a loop turn and an io_uring_enter per datagram; with
// several, one enter receives them all (they complete at submission while
// the socket has datagrams queued). How many a turn issues follows what
// the last turn found (nextDgramBatch): a receive that finds the socket
// empty costs a completion for nothing.
const dgramDepth = 32

// tagDgramRead marks a datagram lane's RECVMSG; the receive's room is in
// the top bits of the slot half of user_data, as for tagFileRead.
const tagDgramRead = tagAccept + 1

// dgramMsgs are the kernel-visible msghdrs of a datagram lane's receives:
// they live in an Arena and belong to one slot, so they outlive any
// receive in flight.
type dgramMsgs [dgramDepth]dgramMsg

// dgramBatch is a datagram lane's receives in flight, and their results.
type dgramBatch struct {
	msgs    *dgramMsgs
	issued  int // receives in the batch
	pending int // of them, not completed
	next    int // receives the next batch issues (nextDgramBatch)
	res     [dgramDepth]int32
	// The datagrams received, for driver.Lane.CommitDatagrams: the room
	// and result of each, in order.
	rooms [dgramDepth]int
	sizes [dgramDepth]int32
	cut   [dgramDepth]bool
}

func (b *dgramBatch) Size(i int) int       { return int(b.sizes[i]) }
func (b *dgramBatch) Truncated(i int) bool { return b.cut[i] }
func (b *dgramBatch) Room(i int) int       { return b.rooms[i] }

// dgramUserData is the user_data of receive i of datagram lane ln.
func dgramUserData(ln *lane, i int) uint64 {
	return PackUserData(ln.slot|uint32(i)<<fileIdxShift, uint32(tagDgramRead)<<genBits|ln.gen)
}

// advanceDgram issues the receives of a readable datagram lane that holds
// a buffer: as many as the buffer has rooms for, up to dgramDepth, or as
// the SQ takes. MSG_TRUNC: each result is its datagram's real length, so
// a datagram longer than its room shows as one.
func (w *worker) advanceDgram(ln *lane) {
	b := w.dgrams[ln.slot]
	room, stride, k := ln.d.DatagramBatch()
	k = min(k, max(b.next, 1))
	space := ln.d.Space()
	b.issued, b.pending = 0, 0
	for i := range k {
		s := w.sqe()
		if s == nil {
			break
		}
		m := &b.msgs[i]
		m.iov.Base = &space[i*stride]
		m.iov.SetLen(room)
		if i == k-1 {
			m.iov.SetLen(len(space) - i*stride) // the last room runs to the end
		}
		m.hdr = unix.Msghdr{Iov: &m.iov}
		m.hdr.SetIovlen(1)
		s.PrepRecvmsg(int(ln.fd), &m.hdr, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		s.UserData = dgramUserData(ln, i)
		b.issued++
	}
	if b.issued == 0 {
		w.enqueue(ln) // no SQE now: next turn
		return
	}
	if b.issued < k {
		// The SQ ran out: the batch's last room runs to the end.
		m := &b.msgs[b.issued-1]
		m.iov.SetLen(len(space) - (b.issued-1)*stride)
	}
	b.pending = b.issued
	ln.op = tagRead
	w.readsIssued = true
}

// dgramDone handles the completion of receive i of a datagram lane; the
// last of its batch commits them all.
func (w *worker) dgramDone(ln *lane, i int, res int32) {
	b := w.dgrams[ln.slot]
	if i >= b.issued || b.pending == 0 {
		return
	}
	w.reads.Add(1)
	b.res[i] = res
	if b.pending--; b.pending > 0 {
		return
	}
	ln.op = tagNone
	w.dgramBatchDone(ln, b)
}

// dgramBatchDone commits what a datagram lane's batch brought, in the
// order of its rooms: a receive that found the socket empty (EAGAIN) says
// it drained; a failure ends the lane once the datagrams before it are
// committed.
func (w *worker) dgramBatchDone(ln *lane, b *dgramBatch) {
	n, drained := 0, false
	var failed error
	for i := range b.issued {
		res := b.res[i]
		errno := unix.Errno(max(-res, 0))
		switch driver.Result(int(max(res, 0)), errno, true) {
		case driver.ReadData:
			m := &b.msgs[i]
			b.rooms[n], b.sizes[n] = i, res
			b.cut[n] = m.hdr.Flags&unix.MSG_TRUNC != 0 || int64(res) > int64(m.iov.Len)
			n++
		case driver.ReadDrained:
			drained = true
		case driver.ReadFailed:
			if failed == nil {
				failed = driver.ReadError(ln.mode.opName(), errno)
			}
		}
	}
	b.next = nextDgramBatch(b.issued, n)
	b.issued = 0
	if n > 0 {
		ln.d.CommitDatagrams(n, b, time.Now(), w.r.log, "ring: runner")
		w.settle(ln)
	} else if ln.d.Held() && ln.d.Pending() == 0 {
		ln.d.Flush(time.Now()) // idle lanes hold no buffer
		w.settle(ln)
	}
	switch {
	case ln.removing:
		w.finish(ln, w.stopErr(ln))
		return
	case failed != nil:
		w.finish(ln, failed)
		return
	}
	ln.readable = !drained
	if ln.flushNow {
		ln.flushNow = false
		w.flushLane(ln, time.Now())
	}
	w.enqueue(ln)
}

// nextDgramBatch is how many receives a datagram lane's next batch
// issues, given that the last issued issued and got datagrams: twice as
// many when every receive brought one (more are likely queued), else one
// more than it got, so that a trickle costs a receive or two a turn and a
// flood grows to dgramDepth in a few turns.
func nextDgramBatch(issued, got int) int {
	if got >= issued {
		return min(dgramDepth, 2*max(issued, 1))
	}
	return min(dgramDepth, got+1)
}

// allocDgram makes sure slot has its datagram batch and off-heap msghdrs.
// A slot keeps them for later lanes, so a worker's arenas grow with its
// peak number of datagram lanes.
func (w *worker) allocDgram(slot uint32) error {
	for int(slot) >= len(w.dgrams) {
		w.dgrams = append(w.dgrams, nil)
	}
	if w.dgrams[slot] != nil {
		return nil
	}
	if n := len(w.arenas); n > 0 {
		if m, err := ArenaAlloc[dgramMsgs](w.arenas[n-1]); err == nil {
			w.dgrams[slot] = &dgramBatch{msgs: m, next: dgramDepth}
			return nil
		}
	}
	a, err := NewArena(dgramArenaSize)
	if err != nil {
		return err
	}
	w.arenas = append(w.arenas, a)
	m, err := ArenaAlloc[dgramMsgs](a)
	if err != nil {
		return fmt.Errorf("datagram msghdrs: %w", err)
	}
	w.dgrams[slot] = &dgramBatch{msgs: m, next: dgramDepth}
	return nil
}
