// How a uring worker reads: polls, receives and reads into pool buffers,
// datagram framing, and handing filled buffers downstream.

package ring

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/runner/uring"
	"github.com/sluice-io/sluice/pool"
)

// readMode says how a lane reads.
type readMode uint8

const (
	modeSock    readMode = iota + 1 // poll, then RECV with MSG_DONTWAIT
	modeStream                      // poll, then READ with RWF_NOWAIT (pipes, ttys)
	modeFile                        // READs at advancing offsets, several in flight, no poll (file_linux.go)
	modeDgram                       // poll, then recvmmsg(2) into the rooms of a buffer (dgram_linux.go)
	modeFileSeq                     // a framed file: one READ at a time into the lane's buffer (read, below)
)

// polled handles a poll completion.
func (w *worker) polled(ln *lane, res int32) {
	if ln.removing {
		w.finish(ln, w.stopErr(ln))
		return
	}
	if res < 0 {
		switch errno := unix.Errno(-res); errno {
		case unix.ECANCELED, unix.EINTR, unix.EAGAIN:
		default:
			w.finish(ln, driver.Classify(os.NewSyscallError("poll", errno)))
			return
		}
	} else {
		// POLLIN, or an end (RDHUP, HUP, ERR) that only a read reports.
		ln.readable = true
		w.host.Readable(ln, ln.mode == modeSock)
		return
	}
	w.host.Enqueue(ln)
}

// readDone handles a read completion.
func (w *worker) readDone(ln *lane, res int32, flags uring.CQEFlags) {
	w.reads.Add(1)
	n, errno := max(int(res), 0), unix.Errno(max(-res, 0))
	switch r := driver.Result(n, errno, false); {
	case ln.removing:
		// Bytes that arrived with the cancel are still delivered.
		if r == driver.ReadData {
			w.received(ln, n, flags)
			if err := w.host.Commit(ln, n, time.Now()); err != nil {
				w.finish(ln, err)
				return
			}
		}
		w.finish(ln, w.stopErr(ln))
		return
	case r == driver.ReadData:
		// The bytes go to the driver and the lane back in line in one
		// call (driver.Host.Completed): a socket that drained arms its
		// poll first thing next turn, one that still holds data is read
		// again next, and a file's lane joins the back of the queue.
		w.received(ln, n, flags)
		if err := w.host.Completed(ln, n, time.Now(), !ln.readable, ln.readable && ln.mode == modeSock); err != nil {
			w.finish(ln, err)
			return
		}
	case r == driver.ReadEnd:
		w.finish(ln, io.EOF)
		return
	case r == driver.ReadDrained:
		ln.readable = false
		w.host.Requeue(ln, true, false)
	case r == driver.ReadFailed:
		w.finish(ln, driver.ReadError(ln.mode.opName(), errno))
		return
	}
	if ln.flushNow {
		ln.flushNow = false
		w.flushLane(ln, time.Now())
	}
}

// received notes what a read of n bytes says of ln's source, before the
// bytes go to its driver: a short read from a socket means it drained (a
// poll, which checks the level when armed, tells when to read again),
// while a framed file read one buffer at a time is always readable, its
// end reading as 0.
func (w *worker) received(ln *lane, n int, flags uring.CQEFlags) {
	switch ln.mode {
	case modeFileSeq:
		ln.fa.next += int64(n)
	case modeSock:
		w.cycleBytes += int64(n)
	}
	ln.readable = flags&uring.CQEFSockNonempty != 0 || n == int(ln.Last) || ln.mode == modeFileSeq
}

func (m readMode) opName() string {
	switch m {
	case modeSock:
		return "recv"
	case modeDgram:
		return "recvmsg"
	}
	return "read"
}

// advanceReady issues the next operation of the lanes in line
// (driver.Line: the light lanes, those draining their sockets, the ready
// queue), in order, until the reads issued may bring driver.TurnBytes or
// the ring failed: the rest keep their places for the next turn, which
// follows at once.
func (w *worker) advanceReady() {
	if w.host.Serve() && w.fatal == nil {
		w.moreReady = true
	}
}

// spent says the turn's budget is spent, or the ring failed.
func (w *worker) spent() bool { return w.fatal != nil || w.host.Pace.Spent() }

// laneStep is what a lane does next (nextStep).
type laneStep uint8

const (
	stepNone   laneStep = iota // wait: an operation in flight, a pool wait, or a cancel issued
	stepCancel                 // removing with an operation in flight: cancel it
	stepCut                    // whole records wait for the buffer their tail moves into
	stepPoll                   // nothing to read: poll for readability
	stepPark                   // readable, but delivery paused reading
	stepFile                   // a file lane: read ahead
	stepRead                   // read, after taking a buffer if it holds none
)

// laneView is what nextStep looks at of a lane.
type laneView struct {
	removing, cancelled bool
	inFlight            bool // an operation is in flight
	file                bool // a file lane with read-ahead, which keeps reads in flight
	waiting             bool // a pool wait is pending
	cutting             bool // driver.Lane.Cutting
	readable            bool
	paused              bool // delivery paused reading
}

// nextStep decides a lane's next step.
func nextStep(v laneView) laneStep {
	switch {
	case v.removing && v.inFlight && !v.cancelled:
		return stepCancel
	case v.removing, v.inFlight && !v.file, v.waiting:
		return stepNone
	case v.cutting:
		return stepCut
	case !v.readable:
		return stepPoll
	case v.paused:
		return stepPark
	case v.file:
		return stepFile
	}
	return stepRead
}

func (w *worker) view(ln *lane) laneView {
	return laneView{
		removing: ln.removing, cancelled: ln.cancelled, inFlight: ln.op != tagNone, file: ln.mode == modeFile,
		waiting: ln.Waiting(), cutting: ln.Driver.Cutting(), readable: ln.readable, paused: w.r.front.Paused.Load(),
	}
}

// advance issues ln's next operation (nextStep): a cancel for a lane
// being removed, a poll for a lane with nothing to read, or a read (after
// taking a buffer). A lane with an operation in flight, or waiting for a
// buffer, waits for that to finish.
func (w *worker) advance(ln *lane) {
	for {
		switch nextStep(w.view(ln)) {
		case stepCancel:
			w.cancel(ln)
		case stepCut:
			if w.acquire(ln) {
				continue // the buffer completed the cut
			}
		case stepPoll:
			w.poll(ln)
		case stepPark:
			w.park(ln)
		case stepFile:
			w.advanceFile(ln)
		case stepRead:
			w.read(ln)
		}
		return
	}
}

// cancel cancels a removed lane's operations.
func (w *worker) cancel(ln *lane) {
	s := w.sqe()
	if s == nil {
		w.host.Enqueue(ln)
		return
	}
	if ln.fixed {
		// By the operation, not the slot: a slot is reused as soon as its
		// lane ends, and a cancel the kernel takes late must find nothing
		// rather than a newer lane.
		s.PrepCancel(ln.userData(ln.op), 0)
	} else {
		s.PrepCancelFd(int(ln.fd), uring.CancelAll)
	}
	s.UserData = ln.userData(tagCancel)
	ln.cancelled = true
}

// poll arms a one-shot poll for a lane with nothing to read; an idle lane
// holds no buffer meanwhile.
func (w *worker) poll(ln *lane) {
	ln.Driver.Idle() // an idle lane holds no buffer
	s := w.sqe()
	if s == nil {
		w.host.Enqueue(ln)
		return
	}
	s.PrepPollAdd(int(ln.fd), unix.POLLIN|unix.POLLRDHUP)
	if ln.fixed {
		s.Flags |= uring.SQEFixedFile
	}
	s.UserData = ln.userData(tagPoll)
	ln.op = tagPoll
	w.polling++
	if ln.mode == modeSock {
		w.pollingStreams++
	}
}

// park holds a readable lane back while delivery paused reading, until
// the resume.
func (w *worker) park(ln *lane) {
	// A buffer taken before the pause and not read into serves the next
	// waiter better, and the resume acquires again (a grant during the
	// pause goes back at once, in grant).
	ln.Driver.Idle()
	if !ln.parked {
		ln.parked = true
		w.parked = append(w.parked, ln)
	}
}

// read issues a readable lane's read into the buffer it holds, taking one
// first if it holds none.
func (w *worker) read(ln *lane) {
	if !ln.Driver.Held() && !w.acquire(ln) {
		return
	}
	if ln.mode == modeDgram {
		w.advanceDgram(ln)
		return
	}
	s := w.sqe()
	if s == nil {
		w.host.Enqueue(ln)
		return
	}
	space := ln.Driver.Space()
	// What the lane's last read brought says what this one may bring.
	w.host.Spend(ln, len(space))
	ln.Last = int32(len(space))
	switch ln.mode {
	case modeSock:
		s.PrepRecv(int(ln.fd), space, unix.MSG_DONTWAIT, 0)
		if ln.fixed {
			s.Flags |= uring.SQEFixedFile
		}
	case modeStream:
		s.PrepRead(int(ln.fd), space, 0)
		s.OpFlags = unix.RWF_NOWAIT
	case modeFileSeq:
		s.PrepRead(int(ln.fd), space, uint64(ln.fa.next))
	}
	s.UserData = ln.userData(tagRead)
	ln.op = tagRead
	w.readsIssued = true
}

// acquire gives a lane a buffer, or queues it for the next one the pool
// frees and reports false.
func (w *worker) acquire(ln *lane) bool {
	b, err := w.host.Acquire(ln, driver.Token(ln.slot, ln.gen))
	switch {
	case err != nil:
		w.finish(ln, fmt.Errorf("ring: runner: lane %d: acquire: %w", ln.lane().ID, err))
		return false
	case b == nil:
		return false
	}
	w.take(ln, b)
	return true
}

// take gives ln the buffer b from its account: a file lane's next
// read-ahead goes into it; any other lane's driver holds it (and a pending
// cut moves its incomplete record into it).
func (w *worker) take(ln *lane, b *pool.Buf) {
	if ln.mode == modeFile {
		ln.fa.grant = b
		return
	}
	w.host.Hold(ln, b, time.Now())
}

// grant collects a buffer the pool reserved for a waiting lane
// (driver.Grants.Collect): a spurious grant leaves it waiting, and one that
// comes while delivery paused reading goes back to the pool unless the
// lane is cutting; the lane parks, and the resume acquires again.
func (w *worker) grant(ln *lane) {
	b, done, err := w.host.Collect(ln, driver.Token(ln.slot, ln.gen), w.r.front.Paused.Load())
	if !done {
		return
	}
	switch {
	case err != nil:
		w.finish(ln, fmt.Errorf("ring: runner: lane %d: acquire: %w", ln.lane().ID, err))
		return
	case b != nil:
		w.take(ln, b)
	}
	w.host.Enqueue(ln)
}
