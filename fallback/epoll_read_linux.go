//go:build linux

// How an epoll worker reads: lane state, readiness events, the ready
// queue, reads, receives and datagrams into pool buffers.

package fallback

import (
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
)

// epLane is a worker's state for one lane. Slots are reused; the token
// (index and generation) tells incarnations apart. A worker keeps one per
// connection, most of them idle: the fields are ordered to pack, and the
// grant notification is made on the lane's first pool wait.
type epLane struct {
	// Seat is what the host keeps of the lane: its driver, its place in
	// the flush heap and in line, its pool wait, and in Last what its last
	// read brought.
	driver.Seat[*epLane]
	tok uint64 // zero when the slot is free
	// early is the token of a readiness event that beat its add command,
	// and earlyHup whether that event reported a hang-up or an error.
	early uint64
	off   int64 // next pread offset, for files
	fd    int

	kind     contract.Kind
	earlyHup bool
	always   bool // not pollable: always readable
	polled   bool // registered with the worker's epoll instance
	sock     bool // a socket: a short read means drained
	readable bool // an edge was seen and the lane has not hit EAGAIN since
	full     bool // read until EAGAIN: a short read does not prove drained
}

// event records one readiness event.
func (w *epWorker) event(ev *unix.EpollEvent) {
	if ev.Fd == epWakeFD {
		// Reset the counter; the commands are drained next turn.
		for {
			if _, err := unix.Read(w.efd, w.drain[:]); err != unix.EINTR {
				break
			}
		}
		return
	}
	if ev.Fd == epAcceptFD {
		w.acceptEvent(ev.Pad)
		return
	}
	tok := epEventToken(ev)
	ln := w.slot(uint32(tok >> 32))
	// The end of stream or an error is only seen by reading past the data.
	hup := ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	if ln.tok != tok {
		// Either the add command is still queued (remember the edge for
		// it) or the lane is gone (a stale token matches nothing later).
		ln.early, ln.earlyHup = tok, hup || (ln.early == tok && ln.earlyHup)
		return
	}
	if hup {
		ln.full = true
	}
	ln.readable = true
	w.host.Readable(ln, ln.sock)
}

// spent says delivery paused reading or the turn's budget is spent.
func (w *epWorker) spent() bool { return w.e.front.Paused.Load() || w.host.Pace.Spent() }

// requeue puts a lane whose socket still holds data after its read
// budget back in line (driver.Requeue): served first next turn, until it
// has been so for driver.DrainReads turns in a row or while delivery
// paused reading; then it joins the back of the queue.
func (w *epWorker) requeue(ln *epLane) { w.host.Requeue(ln, false, !w.e.front.Paused.Load()) }

// service reads a readable lane until EAGAIN, a short socket read, the end
// of its source, a wait for a buffer, or the end of its read budget.
func (w *epWorker) service(ln *epLane) {
	if ln.kind == contract.Datagram {
		w.serviceDatagrams(ln)
		return
	}
	for range epReadsPerTurn {
		if w.e.front.Paused.Load() || w.host.Pace.Spent() {
			// No new reads; the lane stays readable for the resume or
			// the next turn.
			break
		}
		if ln.Driver.NeedsBuffer() && !w.acquire(ln) {
			return
		}
		space := ln.Driver.Space()
		w.host.Spend(ln, len(space))
		n, err := w.read(ln, space)
		ln.Last = int32(max(n, 0))
		switch errno := driver.Errno(err); driver.Result(n, errno, false) {
		case driver.ReadDrained:
			w.drained(ln)
			return
		case driver.ReadAgain:
			continue
		case driver.ReadFailed:
			w.finish(ln, driver.ReadError(w.readOp(ln), errno))
			return
		case driver.ReadEnd:
			w.finish(ln, io.EOF)
			return
		}
		if ln.kind == contract.File {
			ln.off += int64(n)
		}
		if err := w.host.Commit(ln, n, time.Now()); err != nil {
			w.finish(ln, err)
			return
		}
		if ln.Driver.Cutting() && !w.acquire(ln) {
			return // the grant completes the cut and reads on
		}
		if ln.sock && !ln.full && n < len(space) {
			// The socket drained; its next arrival raises a new edge.
			ln.readable = false
			w.host.Drained(ln)
			return
		}
	}
	w.requeue(ln)
}

// serviceDatagrams receives a readable datagram lane's datagrams, as many
// at a time as its buffer has rooms for, until a receive brings fewer than
// it asked for (the socket drained), a wait for a buffer, or the end of
// its budget.
func (w *epWorker) serviceDatagrams(ln *epLane) {
	for budget := epDatagramsPerTurn; budget > 0; {
		if w.e.front.Paused.Load() {
			break
		}
		if ln.Driver.NeedsBuffer() && !w.acquire(ln) {
			return
		}
		w.reads.Add(1)
		n, k, drained, err := w.mmsg.Take(ln.fd, &ln.Driver, budget, w.e.log, "fallback: epoll")
		if err != nil {
			w.finish(ln, err)
			return
		}
		if drained {
			w.drained(ln)
			return
		}
		if n == 0 {
			continue // interrupted: receive again
		}
		w.host.Settle(ln)
		budget -= n
		if n < k {
			// The queue ran dry during the receive: the next datagram
			// raises a new edge.
			ln.readable = false
			return
		}
	}
	w.host.Enqueue(ln)
}

// drained records that a lane's read said EAGAIN: it waits for its next
// edge, and holds no empty buffer meanwhile.
func (w *epWorker) drained(ln *epLane) {
	ln.readable, ln.full = false, false
	w.host.Drained(ln)
	ln.Driver.Idle()
}

func (w *epWorker) readOp(ln *epLane) string {
	switch ln.kind {
	case contract.File:
		return "pread"
	case contract.Datagram:
		return "recvmsg"
	}
	return "read"
}

func (w *epWorker) read(ln *epLane, p []byte) (int, error) {
	for {
		var n int
		var err error
		if ln.kind == contract.File {
			n, err = unix.Pread(ln.fd, p, ln.off)
		} else {
			n, err = unix.Read(ln.fd, p)
		}
		w.reads.Add(1)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// acquire gives a lane a buffer, or queues it for the next one the pool
// frees and reports false. The lane stays readable meanwhile.
func (w *epWorker) acquire(ln *epLane) bool {
	b, err := w.host.Acquire(ln, ln.tok)
	switch {
	case err != nil:
		w.finish(ln, fmt.Errorf("fallback: epoll: lane %d: acquire: %w", ln.Driver.Lane().ID, err))
		return false
	case b == nil:
		return false
	}
	w.host.Hold(ln, b, time.Now())
	return true
}

// grant collects a buffer the pool reserved for a waiting lane
// (driver.Grants.Collect): a spurious grant leaves it waiting, and one that
// comes while delivery paused reading goes back to the pool unless the
// lane is cutting; the lane stays readable and queued, so the resume
// acquires again.
func (w *epWorker) grant(tok uint64) {
	ln := w.lane(tok)
	if ln == nil {
		return
	}
	b, done, err := w.host.Collect(ln, tok, w.e.front.Paused.Load())
	if !done {
		return
	}
	switch {
	case err != nil:
		w.finish(ln, fmt.Errorf("fallback: epoll: lane %d: acquire: %w", ln.Driver.Lane().ID, err))
		return
	case b != nil:
		w.host.Hold(ln, b, time.Now())
	}
	w.host.Enqueue(ln) // readable: it was when it asked
}
