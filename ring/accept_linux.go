// Accepting on the ring: a listener's connections are accepted by
// IORING_OP_ACCEPT on every worker's ring, each straight into a slot of
// the worker's registered file table, and the lane that reads one stays on
// the worker that accepted it.

package ring

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/front"
	"github.com/sluice-io/sluice/internal/runner/uring"
)

// acceptDepth is how many accepts a worker keeps armed for one listener
// while it may: enough that a burst of connections is taken at the rate
// the listener's loop adds them, not one ring round trip at a time.
const acceptDepth = 16

// tagAccept marks an accept's CQE; its slot field is the accept's place
// in the worker's acceptOps.
const tagAccept = tagFileRead + 1

// StartAccept implements contract.AcceptRunner: the listener's accepts are
// armed on every worker's ring (single-shot IORING_OP_ACCEPT with a
// sockaddr each, so that every connection is named by its peer and can
// be refused by address; a multishot accept shares one sockaddr, and a
// direct descriptor has no getpeername). A connection goes into a slot
// of the accepting worker's file table when one is free, and its source
// is then contract.Directed, read by that worker alone; otherwise it comes as
// a descriptor (and EMFILE as an error, for the listener to back off).
//
// The kernel hands each connection to one armed accept, and the grants
// keep about as many armed on every worker, so connections spread over
// the workers.
func (r *Runner) StartAccept(fd int) (contract.AcceptQueue, error) {
	q, err := front.NewAccepts("ring: runner", fd, r.workers, acceptDepth)
	if err != nil {
		return nil, err
	}
	q.Post = func(a *acceptor, stop bool) bool {
		op := cmdArm
		if stop {
			op = cmdStopAccept
		}
		return a.W.post(cmd{op: op, acc: a})
	}
	q.Closed = r.front.Closed
	q.DirectClose = func(worker, slot uint32) {
		if int(worker) < len(r.workers) {
			r.workers[worker].post(cmd{op: cmdCloseSlot, tok: uint64(slot)})
		}
	}
	return &acceptQueue{q, r}, nil
}

// acceptQueue is one listener's accepts on the runner (contract.AcceptQueue);
// it knows the runner it belongs to, so that Add can tell its
// connections from another runner's.
type acceptQueue struct {
	*front.Accepts[*worker]
	r *Runner
}

// acceptor is a listener's accepts on one worker.
type acceptor = front.Acceptor[*worker]

// acceptOp is one armed accept: where the kernel writes the peer's
// address. The worker keeps it until the CQE arrives.
type acceptOp struct {
	acc  *acceptor
	addr unix.RawSockaddrAny
	alen uint32
	slot uint32 // the file slot accepted into, if direct
	// direct says the accept installs into slot rather than making a
	// descriptor.
	direct bool
	busy   bool
}

// armAccepts arms accepts for a's grants while the worker may.
func (w *worker) armAccepts(a *acceptor) {
	if w.closing || a.Stopping {
		a.Revoke()
		return
	}
	if !a.Listed {
		a.Listed = true
		w.acceptors = append(w.acceptors, a)
	}
	for a.Take() {
		if !w.armAccept(a) {
			// No SQE now: try again on a later turn.
			a.Untake()
			w.post(cmd{op: cmdArm, acc: a})
			return
		}
	}
}

// armAccept queues one accept for a.
func (w *worker) armAccept(a *acceptor) bool {
	s := w.sqe()
	if s == nil {
		return false
	}
	idx := w.acceptOp()
	op := w.acceptOps[idx]
	*op = acceptOp{acc: a, alen: unix.SizeofSockaddrAny, busy: true}
	if slot, ok := w.takeSlot(); ok {
		op.slot, op.direct = slot, true
		// A direct accept takes no SOCK_CLOEXEC: the slot is no
		// descriptor of the process.
		s.PrepAccept(a.Q.LFD, &op.addr, &op.alen, unix.SOCK_NONBLOCK)
		s.FileIndex = int32(slot) + 1
	} else {
		s.PrepAccept(a.Q.LFD, &op.addr, &op.alen, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	}
	s.UserData = uring.PackUserData(idx, uint32(tagAccept)<<genBits)
	a.Armed++
	w.accepting++
	return true
}

// acceptOp returns the index of a free accept record.
func (w *worker) acceptOp() uint32 {
	if k := len(w.acceptFree); k > 0 {
		idx := w.acceptFree[k-1]
		w.acceptFree = w.acceptFree[:k-1]
		return idx
	}
	w.acceptOps = append(w.acceptOps, new(acceptOp))
	return uint32(len(w.acceptOps) - 1)
}

// acceptDone hands an accept's connection, or its error, to the
// listener's loop.
func (w *worker) acceptDone(idx uint32, res int32) {
	if int(idx) >= len(w.acceptOps) || !w.acceptOps[idx].busy {
		return
	}
	op := w.acceptOps[idx]
	a := op.acc
	out := contract.RunnerAccepted{FD: -1}
	switch {
	case res < 0:
		if op.direct {
			w.putSlot(op.slot)
		}
		out.Err = w.acceptErr(a, unix.Errno(-res))
	case op.direct && w.Stopped():
		// Accepted while a failed worker reaps its last completions:
		// its table goes with its ring, and no lane can be placed here
		// any more. The client sees the connection close.
		w.setSlot(op.slot, -1)
		out.Err = a.Q.StopErr(w.id, "stopped")
	case op.direct:
		w.files.used.Add(1)
		out.Direct, out.Worker, out.Slot = true, uint32(w.id), op.slot
	default:
		out.FD = int(res)
	}
	if out.Err == nil {
		out.Peer, out.Path = uring.Peer(&op.addr, op.alen)
		w.accepted.Add(1)
	}
	*op = acceptOp{}
	w.acceptFree = append(w.acceptFree, idx)
	a.Armed--
	w.accepting--
	a.Done(out)
	if a.Stopping && a.Armed == 0 {
		w.unlistAcceptor(a)
		a.AckStop()
	}
}

// acceptErr is the error of a failed accept, as accept4(2)'s would be.
// A cancelled accept was stopped by the listener (whose loop is done),
// by the runner's close, or by the worker's failure, which leaves the
// grant to be given again.
func (w *worker) acceptErr(a *acceptor, e unix.Errno) error {
	if e != unix.ECANCELED {
		return os.NewSyscallError("accept4", e)
	}
	return a.Q.StopErr(w.id, "cancelled")
}

// stopAccepts stops a's accepts on this worker: its grants go back and
// what is armed is cancelled (by the duplicated socket, which only the
// listener's accepts use).
func (w *worker) stopAccepts(a *acceptor) {
	a.Stopping = true
	a.Revoke()
	if a.Armed == 0 {
		w.unlistAcceptor(a)
		a.AckStop()
		return
	}
	w.cancelAccepts(a) // the last accept's CQE lets go of the socket
}

// cancelAccepts cancels every accept a has armed on this worker.
func (w *worker) cancelAccepts(a *acceptor) {
	s := w.sqe()
	if s == nil {
		if w.fatal == nil {
			// No SQE now: try again on a later turn. (A failed ring
			// hands the accepts back at teardown.)
			w.post(cmd{op: cmdStopAccept, acc: a})
		}
		return
	}
	s.PrepCancelFd(a.Q.LFD, uring.CancelAll)
	s.UserData = uring.PackUserData(0, uint32(tagCancel)<<genBits)
}

// unlistAcceptor drops a from the worker's list once nothing of it is
// armed.
func (w *worker) unlistAcceptor(a *acceptor) {
	if !a.Listed {
		return
	}
	a.Listed = false
	for i, b := range w.acceptors {
		if b == a {
			last := len(w.acceptors) - 1
			w.acceptors[i] = w.acceptors[last]
			w.acceptors[last] = nil
			w.acceptors = w.acceptors[:last]
			return
		}
	}
}

// closeAccepts is the worker's part of Close: every listener's accepts
// here are stopped. The worker exits once their CQEs are in.
func (w *worker) closeAccepts() {
	for _, a := range append([]*acceptor(nil), w.acceptors...) {
		w.stopAccepts(a)
	}
}

// abandonAccepts hands back, as errors, the accepts still armed when the
// ring closed: their CQEs are gone with it, and so is a connection one
// of them may have taken into the file table.
func (w *worker) abandonAccepts(reason error) {
	for idx, op := range w.acceptOps {
		if !op.busy {
			continue
		}
		a := op.acc
		err := a.Q.StopErr(w.id, fmt.Sprintf("stopped (%v)", reason))
		*op = acceptOp{}
		w.acceptFree = append(w.acceptFree, uint32(idx))
		a.Armed--
		w.accepting--
		a.Done(contract.RunnerAccepted{FD: -1, Err: err})
	}
	for _, a := range w.acceptors {
		a.Revoke()
		a.AckStop()
	}
	w.acceptors = nil
}

// closeSlot empties a slot no lane took.
func (w *worker) closeSlot(slot uint32) {
	err := w.setSlot(slot, -1)
	switch {
	case errors.Is(err, uring.ErrClosed):
		w.files.used.Add(-1)
	case err != nil:
		w.r.log.Error("ring: runner: closing an accepted connection", "worker", w.id, "slot", slot, "err", err)
	default:
		w.putSlot(slot)
		w.files.used.Add(-1)
	}
}

// addDirect places a lane whose connection a worker accepted into its
// table on that worker, which alone can read it.
func (r *Runner) addDirect(l *contract.Lane, d contract.Directed) error {
	if q, ok := d.AcceptedBy().(*acceptQueue); !ok || q.r != r {
		return fmt.Errorf("ring: runner: add lane %d (%s): the connection was accepted by another runner", l.ID, l.Name())
	}
	if err := r.front.Addable(l); err != nil {
		return err
	}
	if err := contract.CheckFraming(l, contract.Stream); err != nil {
		return fmt.Errorf("ring: runner: add %w", err)
	}
	wi, slot, ok := d.TakeDirect()
	if !ok || int(wi) >= len(r.workers) {
		return fmt.Errorf("ring: runner: add lane %d (%s): %w", l.ID, l.Name(), net.ErrClosed)
	}
	// The lane owns the slot from here: a worker that has stopped closes
	// its ring, and the table with it.
	c := cmd{op: cmdAdd, lane: l, fd: int(slot), mode: modeSock, direct: true}
	return r.front.PlaceOn(l, r.workers[wi], func(w *worker) (uint64, bool, error) { return r.queueAdd(w, l, c) })
}
