// How a uring worker ends: after Close, or after its ring failed.

package ring

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/srcs"
)

// quiesceTimeout is how long a worker that failed waits for the operations
// of its lanes to complete before it closes the ring anyway.
const quiesceTimeout = 5 * time.Second

// shutdown closes the ring and the Waker. After a ring failure (cause is
// not nil) it first stops every lane and lets their operations complete
// (quiesce), so that data a read already took from its source is emitted;
// a lane whose operation is still in flight when the ring has to close
// anyway gives up its buffer for good (see abandon).
func (w *worker) shutdown(cause error) {
	reason := srcs.ErrStopped
	if cause != nil {
		reason = fmt.Errorf("ring: runner: worker %d: %w", w.id, cause)
		// Before stopped is set: an Add that finds every worker stopped
		// reports the first failure.
		w.r.front.Fail(reason)
	}
	rest := w.Stop(nil)
	var errs []error
	if cause != nil {
		errs = append(errs, reason)
		w.r.log.Error("ring: runner: worker stopped", "worker", w.id, "err", cause)
	}
	for i := range rest {
		switch rest[i].op {
		case cmdAdd:
			w.add(&rest[i])
		case cmdSync:
			w.syncs = append(w.syncs, rest[i].done)
		case cmdArm:
			rest[i].acc.Revoke()
		case cmdStopAccept:
			rest[i].acc.Revoke()
			rest[i].acc.AckStop()
		case cmdCloseSlot:
			w.closeSlot(uint32(rest[i].tok))
		}
	}
	for _, ch := range w.syncs {
		close(ch)
	}
	w.syncs = nil
	if cause != nil {
		w.quiesce(reason)
	}
	closeErr := w.r.opts.closeRing(w.ring)
	w.abandonAccepts(reason)
	if closeErr != nil {
		errs = append(errs, fmt.Errorf("ring: runner: worker %d: %w", w.id, closeErr))
	}
	leaked := 0
	for ln := range w.slots.All() {
		if ln.gen == 0 {
			continue
		}
		err := reason
		if ln.op != tagNone {
			if closeErr != nil && w.abandon(ln) {
				leaked++
				err = fmt.Errorf("%w; its buffer was abandoned to a read still in flight", reason)
			}
			ln.op = tagNone // the ring is closed: its CQEs are gone
		}
		w.finish(ln, err)
	}
	if leaked > 0 {
		w.r.log.Error("ring: runner: buffers leaked to reads still in flight after the ring closed",
			"worker", w.id, "buffers", leaked, "err", closeErr)
		errs = append(errs, fmt.Errorf("ring: runner: worker %d: leaked %d buffers to reads still in flight", w.id, leaked))
	}
	if err := w.waker.Close(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		w.r.front.CloseErrs(errs...)
	}
}

// quiesce stops every lane of a failed worker with reason and keeps routing
// completions through handleCQE until no lane has an operation in flight,
// the ring refuses to work, or opts.quiesce has passed. Reads that
// completed before the failure carry data already taken from the source.
func (w *worker) quiesce(reason error) {
	// What failed was the loop; cancels may still get through.
	w.fatal = nil
	w.failure = reason
	for ln := range w.slots.All() {
		if ln.gen != 0 {
			w.stop(ln, true)
		}
	}
	w.closeAccepts()
	if w.r.opts.quiesce < 0 {
		return
	}
	deadline := time.Now().Add(w.r.opts.quiesce)
	for {
		w.ring.ForEachCQE(w.onCQE)
		w.woken = false // the Waker stays unarmed: nobody can post now
		if w.fatal == nil {
			w.advanceReady() // cancels that found no SQE before
		}
		left := time.Until(deadline)
		if !w.busy() || left <= 0 {
			return
		}
		_, err := w.ring.SubmitAndWaitTimeout(1, min(left, 100*time.Millisecond))
		if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
			w.r.log.Error("ring: runner: reaping after failure", "worker", w.id, "err", err)
			return
		}
	}
}

// busy reports whether any lane has an operation in flight.
func (w *worker) busy() bool {
	if w.accepting > 0 {
		return true
	}
	for ln := range w.slots.All() {
		if ln.gen != 0 && ln.op != tagNone {
			return true
		}
	}
	return false
}

// abandon gives up ln's buffer when a read the kernel may still complete
// refers to it: neither released nor emitted, it can never be reused, and
// it stays charged to the lane's account. Held data goes with it. It
// reports whether there was a buffer to abandon.
func (w *worker) abandon(ln *lane) bool {
	if ln.mode == modeFile && ln.op == tagRead {
		return w.abandonFile(ln)
	}
	return ln.op == tagRead && ln.Driver.Abandon()
}
