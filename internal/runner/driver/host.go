package driver

import (
	"time"

	"github.com/sluice-io/sluice/pool"
)

// Seat is what the lane host keeps of one lane: its driver, its place in
// the flush heap and in line, and its pool wait. A backend embeds one in
// its lane state, whose HostSeat method (promoted from here) is how the
// host finds it. The fields are ordered to pack: a worker keeps one per
// connection it drives, most of them idle.
type Seat[L any] struct {
	// Driver is the lane's machine (Lane: its buffer, its framing and
	// the emit rules); the backend arms reads and the host tells the
	// machine what they brought.
	Driver Lane
	fl     FlushMark[L] // the lane's place in the flush heap, while the driver has a deadline
	// Last is what the lane's last read brought, which says what its next
	// may bring (Host.Spend) and whether its socket is light (Host.Readable);
	// while a uring read is in flight, what that read asked for.
	Last    int32
	queued  bool  // in line
	waiting bool  // a pool wait is pending
	streak  uint8 // reads in a row that left the socket with data (Requeue)
}

// HostSeat returns s: a backend's lane, which embeds its Seat, has it too.
func (s *Seat[L]) HostSeat() *Seat[L] { return s }

// Waiting reports whether the lane waits for a pool grant.
func (s *Seat[L]) Waiting() bool { return s.waiting }

// Hosted is a backend's lane: a pointer to a state that embeds a Seat.
type Hosted[L any] interface {
	comparable
	HostSeat() *Seat[L]
}

// Host is an event-loop worker's lane bookkeeping, written once for the
// uring and epoll backends: the line a turn serves lanes in, the turn's
// pace, a lane's buffer (acquire, and the grant a waiting lane collects),
// what its reads bring (commit), where it stands after a read (requeue)
// and its flush deadline. The backend does what only it can: arm a poll
// or a read, cancel, wait, wake. A Host belongs to its worker's goroutine
// but for the grant notification, which posts to the worker.
type Host[L Hosted[L]] struct {
	line    Line[L]
	grants  Grants
	flushes FlushHeap[L]
	// Pace is the turn's budget of bytes and when to yield to processing.
	Pace Pace
	// Starved counts the lanes waiting for a pool buffer.
	Starved int

	stop     func() bool
	serve    func(L)
	served   func(L) // serveQueued, bound once so that a turn allocates nothing
	slack    func(L) time.Duration
	flushDue func(L, time.Time)
}

// Init sets the backend's calls, each bound once so that a turn allocates
// nothing: post sends a grant for the lane tok names to the worker (which
// then calls Collect), stop ends a turn's service early (Serve), serve
// advances a lane the line serves, and flushDue flushes a lane whose flush
// deadline came (FlushDue).
func (h *Host[L]) Init(pace Pace, post func(tok uint64), stop func() bool, serve func(L), flushDue func(L, time.Time)) {
	h.Pace = pace
	h.grants.Post = post
	h.stop, h.serve, h.flushDue = stop, serve, flushDue
	h.served = h.serveQueued
	h.slack = laneSlack[L]
}

func laneSlack[L Hosted[L]](ln L) time.Duration { return ln.HostSeat().Driver.FlushSlack() }

// Enqueue puts ln at the back of the ready queue, unless it stands in
// line already.
func (h *Host[L]) Enqueue(ln L) {
	if s := ln.HostSeat(); !s.queued {
		s.queued = true
		h.line.Ready(ln)
	}
}

// Readable puts in line a lane whose source became readable: first among
// the lanes of the next turn when it is a socket whose last read brought
// little (LightRead), else at the back of the ready queue. A lane waiting
// for a buffer stays out: its grant puts it in line.
func (h *Host[L]) Readable(ln L, sock bool) {
	s := ln.HostSeat()
	switch {
	case s.waiting:
	case sock && s.Last > 0 && s.Last <= LightRead && !s.queued:
		s.queued = true
		h.line.Light(ln)
	default:
		h.Enqueue(ln)
	}
}

// Requeue puts a lane whose read completed back in line where Requeue
// (the function) places it, and keeps its streak.
func (h *Host[L]) Requeue(ln L, armPoll, drainable bool) {
	s := ln.HostSeat()
	var p Place
	if p, s.streak = Requeue(s.queued, armPoll, drainable, s.streak); p != PlaceNone {
		s.queued = true
		h.line.Stand(ln, p)
	}
}

// Drained forgets the reads in a row of a lane whose socket drained.
func (h *Host[L]) Drained(ln L) { ln.HostSeat().streak = 0 }

// Serve starts a turn's budget and advances the lanes in line, in order,
// until stop says the turn is over; it reports whether lanes were left
// for the next turn. A lane that left the line meanwhile (it finished, or
// was advanced by a command) is skipped.
func (h *Host[L]) Serve() (left bool) {
	h.Pace.Turn()
	return h.line.Serve(h.stop, h.served)
}

func (h *Host[L]) serveQueued(ln L) {
	if s := ln.HostSeat(); s.queued {
		s.queued = false
		h.serve(ln)
	}
}

// Lined returns how many entries stand in line.
func (h *Host[L]) Lined() int { return h.line.Len() }

// Spend charges the turn's budget for a read of space bytes about to be
// issued: what the lane's last read brought says what this one may bring.
func (h *Host[L]) Spend(ln L, space int) { h.Pace.Spend(min(int(ln.HostSeat().Last), space)) }

// Commit hands n bytes a read brought to ln's driver at now, counts them
// and the chunks it emitted for the turn's pace, and keeps ln's place in
// the flush heap. An error (the bytes could not be framed) ends the lane:
// the backend finishes it.
func (h *Host[L]) Commit(ln L, n int, now time.Time) error {
	h.Pace.Read(n)
	st, err := ln.HostSeat().Driver.Commit(n, now)
	h.note(ln, st)
	return err
}

// Completed is a completed read's bookkeeping in one call: the n bytes
// ln's read brought at now go to its driver (Commit), and the lane stands
// in line for its next read where Requeue places it, with armPoll and
// drainable as there. An error ends the lane, which then stands nowhere.
func (h *Host[L]) Completed(ln L, n int, now time.Time, armPoll, drainable bool) error {
	if err := h.Commit(ln, n, now); err != nil {
		return err
	}
	ln.HostSeat().Last = int32(n)
	h.Requeue(ln, armPoll, drainable)
	return nil
}

// Settle follows a step of ln's driver other than a commit (a hold, a
// flush, a datagram batch): see Commit.
func (h *Host[L]) Settle(ln L) { h.note(ln, ln.HostSeat().Driver.Settle()) }

func (h *Host[L]) note(ln L, st Step) {
	h.Pace.Emitted(st.Emitted)
	h.flushes.Set(&ln.HostSeat().fl, ln, st.Due, st.HasDue)
}

// Hold gives ln's driver the buffer b (a pending cut moves its incomplete
// record into it).
func (h *Host[L]) Hold(ln L, b *pool.Buf, now time.Time) {
	ln.HostSeat().Driver.Hold(b, now)
	h.Settle(ln)
}

// Acquire takes a buffer for ln, whose token is tok, from its account
// (Grants.Acquire). When the pool has none for it now, the lane waits for
// a grant and b is nil; an error ends the lane.
func (h *Host[L]) Acquire(ln L, tok uint64) (b *pool.Buf, err error) {
	s := ln.HostSeat()
	b, wait, err := h.grants.Acquire(s.Driver.Lane().Account, tok)
	if wait {
		s.waiting = true
		h.Starved++
	}
	return b, err
}

// Collect takes the buffer a grant reserved for ln (Grants.Collect): done
// is false when the lane still waits (no wait pending, or a spurious
// grant). While delivery is paused the buffer goes back to the pool
// unless the lane is cutting, and b is nil. An error ends the lane.
func (h *Host[L]) Collect(ln L, tok uint64, paused bool) (b *pool.Buf, done bool, err error) {
	s := ln.HostSeat()
	if !s.waiting {
		return nil, false, nil
	}
	b, wait, err := h.grants.Collect(s.Driver.Lane().Account, tok, paused && !s.Driver.Cutting())
	if wait {
		return nil, false, nil
	}
	s.waiting = false
	h.Starved--
	return b, true, err
}

// FlushDue hands the backend each lane whose flush deadline has passed at
// now or falls within its slack (FlushHeap.PopDue).
func (h *Host[L]) FlushDue(now time.Time) { h.flushes.PopDue(now, h.slack, h.flushDue) }

// NextFlush returns how long after now the earliest flush deadline falls,
// and false when no lane holds partial data.
func (h *Host[L]) NextFlush(now time.Time) (time.Duration, bool) {
	if h.flushes.Len() == 0 {
		return 0, false
	}
	_, due := h.flushes.Min()
	return due.Sub(now), true
}

// Leave takes a finishing lane out of the host's books: the flush heap,
// and the count of lanes waiting for a buffer (the driver's Finish
// withdraws the wait itself). Entries of it in line go stale when the
// backend clears its state.
func (h *Host[L]) Leave(ln L) {
	s := ln.HostSeat()
	h.flushes.Remove(&s.fl)
	if s.waiting {
		s.waiting = false
		h.Starved--
	}
}
