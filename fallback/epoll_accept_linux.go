//go:build linux

// Accepting in the epoll workers' own loops: every worker watches the
// listener's socket, edge-triggered, and accepts with accept4(2) while it
// holds grants.

package fallback

import (
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/front"
)

// epAcceptDepth is how many grants a listener holds per worker, all of
// them with its accepting worker.
const epAcceptDepth = 16

// epAcceptFD marks a listener's readiness event; the event's Pad is the
// acceptor's place in the worker's list.
const epAcceptFD = -2

type epAcceptor = front.Acceptor[*epWorker]

// StartAccept implements contract.AcceptRunner: one worker, a different one
// for each listener in turn, registers a duplicate of the listening
// socket with its epoll instance (EPOLLIN|EPOLLET) and, while it holds
// grants, accepts with accept4(2) until the backlog is empty, on a
// readiness edge and whenever it is granted more. A connection comes as
// a non-blocking descriptor, named by the peer accept4 reports, and Add
// places it on the least loaded worker, as any other. Should the
// accepting worker fail, the next one takes the grants over. (Every
// worker watching the socket would wake them all for each connection.)
func (e *Epoll) StartAccept(fd int) (contract.AcceptQueue, error) {
	k := int(e.listeners.Add(1)-1) % len(e.workers)
	ws := append(append([]*epWorker(nil), e.workers[k:]...), e.workers[:k]...)
	q, err := front.NewAccepts("fallback: epoll", fd, ws, epAcceptDepth)
	if err != nil {
		return nil, err
	}
	q.Concentrate = true
	q.Post = func(a *epAcceptor, stop bool) bool {
		op := epArm
		if stop {
			op = epStopAccept
		}
		return a.W.post(epCmd{op: op, acc: a})
	}
	q.Closed = e.front.Closed
	return q, nil
}

// arm takes a's new grants: the worker watches the listener from the
// first, and accepts what is queued at once.
func (w *epWorker) arm(a *epAcceptor) {
	if a.Stopping {
		a.Revoke()
		return
	}
	if !a.Listed {
		slot := len(w.acceptors)
		for i, b := range w.acceptors {
			if b == nil {
				slot = i
				break
			}
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: epAcceptFD, Pad: int32(slot)}
		w.ctls.Add(1)
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, a.Q.LFD, &ev); err != nil {
			err = os.NewSyscallError("epoll_ctl", err)
			for a.Take() {
				a.Done(contract.RunnerAccepted{FD: -1, Err: err})
			}
			return
		}
		if slot == len(w.acceptors) {
			w.acceptors = append(w.acceptors, nil)
		}
		w.acceptors[slot], a.Slot, a.Listed = a, slot, true
	}
	w.acceptNow(a)
}

// acceptNow accepts while a holds grants and connections are queued.
func (w *epWorker) acceptNow(a *epAcceptor) {
	for a.Take() {
		nfd, sa, err := unix.Accept4(a.Q.LFD, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		w.accepts.Add(1)
		switch err {
		case nil:
			w.accepted.Add(1)
			peer, path := peerOf(sa)
			a.Done(contract.RunnerAccepted{FD: nfd, Peer: peer, Path: path})
		case unix.EAGAIN:
			// Drained: the next connection raises a new edge.
			a.Untake()
			return
		case unix.ECONNABORTED, unix.EINTR:
			a.Untake()
		default:
			// EMFILE and the like: the listener backs off and grants
			// again; retrying here would spin.
			a.Done(contract.RunnerAccepted{FD: -1, Err: os.NewSyscallError("accept4", err)})
			return
		}
	}
}

// acceptEvent serves a listener's readiness edge.
func (w *epWorker) acceptEvent(slot int32) {
	if int(slot) < len(w.acceptors) {
		if a := w.acceptors[slot]; a != nil && !a.Stopping {
			w.acceptNow(a)
		}
	}
}

// stopAccept stops a's accepts on this worker: the worker stops watching
// the listener, gives its grants back and lets go of the socket, which
// the listener's loop then closes.
func (w *epWorker) stopAccept(a *epAcceptor) {
	a.Stopping = true
	if a.Listed {
		w.ctls.Add(1)
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, a.Q.LFD, nil)
		w.acceptors[a.Slot], a.Listed = nil, false
	}
	a.Revoke()
	a.AckStop()
}

// peerOf is the address accept4 reported, as contract.RunnerAccepted has it.
func peerOf(sa unix.Sockaddr) (netip.AddrPort, string) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), ""
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), ""
	case *unix.SockaddrUnix:
		return netip.AddrPort{}, a.Name
	}
	return netip.AddrPort{}, ""
}
