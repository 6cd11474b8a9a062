//go:build linux

// How an epoll worker ends a lane, and how it ends itself: after Close,
// or after epoll_wait failed.

package fallback

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/srcs"
)

// finish ends a lane: it leaves the epoll set before Finish, because the
// engine closes the descriptor right after.
func (w *epWorker) finish(ln *epLane, err error) {
	if ln.polled {
		w.ctls.Add(1)
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, ln.fd, nil)
	}
	w.host.Leave(ln)
	l, tok, f := ln.Driver.Lane(), ln.tok, ln.Driver
	*ln = epLane{} // the slot is free; queued tokens go stale
	w.e.front.Finished(w, l, tok)
	f.Finish(err)
}

// shutdown finishes every lane, including those whose add command is still
// queued, then closes the worker's descriptors.
func (w *epWorker) shutdown(cause error) {
	reason := srcs.ErrStopped
	if cause != nil {
		reason = fmt.Errorf("fallback: epoll: worker: %w", cause)
		w.e.log.Error("fallback: epoll: worker stopped", "err", cause)
		// Before stopped is set: an Add that finds every worker stopped
		// reports the first failure.
		w.e.front.Fail(reason)
	}
	rest := w.Stop(nil)
	for i := range rest {
		switch rest[i].op {
		case epAdd:
			w.add(&rest[i])
		case epArm:
			rest[i].acc.Revoke()
		case epStopAccept:
			rest[i].acc.Revoke()
			rest[i].acc.AckStop()
		}
	}
	// Grants posted from now on come straight back (front.Accepts).
	for _, a := range w.acceptors {
		if a != nil {
			a.Revoke()
		}
	}
	for ln := range w.slots.All() {
		if ln.tok != 0 {
			w.finish(ln, reason)
		}
	}
	// post checks stopped under mu, so nobody writes the eventfd now.
	if err := errors.Join(cause, w.closeFDs()); err != nil {
		w.e.front.CloseErrs(fmt.Errorf("fallback: epoll: worker: %w", err))
	}
}
