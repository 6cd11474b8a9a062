//go:build linux

package fallback

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/runner/front"
)

const (
	// epMaxEvents is how many readiness events one epoll_wait returns.
	epMaxEvents = 128
	// epReadsPerTurn caps the reads one lane gets per loop turn, so a hot
	// lane or a file (always readable) cannot starve the others: once the
	// budget is spent the lane goes to the back of the ready queue.
	epReadsPerTurn = 4
	// epDatagramsPerTurn is the same budget for datagram lanes, counted
	// in datagrams, which are mostly far smaller than a stream read; it is
	// also the most one recvmmsg(2) asks for.
	epDatagramsPerTurn = 64
	// epWakeFD marks the eventfd's readiness event; lane tokens carry a
	// slot index, which is never negative.
	epWakeFD = -1
)

// Epoll is the edge-triggered epoll runner: RunnerConfig.Workers workers
// (one when zero), each a goroutine locked to its OS thread that owns one
// epoll instance and one eventfd for wake-ups. Lanes go to the least loaded
// worker on Add and stay there.
//
// A lane's descriptor is registered edge-triggered (EPOLLIN|EPOLLRDHUP|
// EPOLLET) with an integer token (slot index and generation) as its data,
// never a Go pointer, and set non-blocking. A readable lane takes a buffer
// from its pool account only then, so idle lanes hold none, and reads until
// EAGAIN; the readiness is remembered across a wait for a buffer, a pause
// and the per-turn read budget, so no edge is lost. Regular files cannot be
// registered with epoll: they are treated as always readable and read with
// pread(2) from Desc.Offset, a bounded number of reads per loop turn.
// Datagram descriptors (SOCK_DGRAM sockets) are read many datagrams per
// recvmmsg(2), as many as the buffer has rooms for, until one brings fewer
// than it asked for, into buffers framed as srcs.ForEachDatagram reads
// them; a datagram too large for its room is dropped, reported to the
// emitter if it is a contract.DatagramDropReporter, and logged once per lane,
// and the lane keeps running.
//
// A listener's connections are accepted in a worker's loop (StartAccept,
// srcs.Listener.AcceptThrough): one worker per listener watches a
// duplicate of the listening socket, edge-triggered, and accepts with
// accept4(2) while it holds grants from the listener (none at its
// MaxConns), and whenever it is granted more.
//
// Nothing but a worker touches its lanes: Add, Remove, SetPaused and pool
// grants post commands to the worker's queue and write its eventfd when it
// sleeps. Each loop turn drains the commands, serves the ready lanes,
// emits partial buffers whose flush deadline passed, and makes one
// epoll_wait whose timeout is the nearest flush deadline.
//
// An Epoll is safe for concurrent use. It uses each lane's descriptor from
// Add until just before it calls Finish and never closes it. It needs Linux
// 2.6.27 or later (epoll_create1, eventfd2, EPOLLRDHUP).
type Epoll struct {
	log     contract.Logger
	workers []*epWorker
	wg      sync.WaitGroup
	front   front.Front[*epWorker] // the lanes being driven; add, remove, close

	front.Control[*epWorker] // Remove, SetPaused, Close and Stats

	listeners atomic.Uint32 // StartAccept's turn among the workers
}

// NewEpoll creates the workers' epoll instances and eventfds and starts the
// workers. A zero cfg.Workers means one worker; the engine passes its own
// default.
func NewEpoll(cfg contract.RunnerConfig) (*Epoll, error) {
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("fallback: epoll: config: Workers = %d: must not be negative", cfg.Workers)
	}
	n := max(cfg.Workers, 1)
	log := cfg.Logger
	if log == nil {
		log = contract.Discard{}
	}
	e := &Epoll{log: log}
	for range n {
		w, err := newEpWorker(e, driver.NewPace(cfg))
		if err != nil {
			for _, w := range e.workers {
				w.closeFDs()
			}
			return nil, err
		}
		e.workers = append(e.workers, w)
	}
	e.front = front.Front[*epWorker]{Name: "fallback: epoll", Workers: e.workers}
	e.front.Ops = front.Ops[*epWorker]{
		Runner: "epoll", Stats: (*epWorker).stats, Wait: e.wg.Wait,
		Post: func(w *epWorker, op front.Op, tok uint64) {
			w.post(epCmd{op: [...]epOp{front.OpRemove: epRemove, front.OpResume: epWake, front.OpStop: epClose}[op], tok: tok})
		},
	}
	e.Control = e.front.Control()
	for _, w := range e.workers {
		e.wg.Go(w.run)
	}
	log.Debug("fallback: epoll runner", "workers", n)
	return e, nil
}

// Add registers l's descriptor with the least loaded worker that has not
// failed. It fails with srcs.ErrNoDescriptor for a source that is no
// contract.Descriptor, for a datagram descriptor that is no SOCK_DGRAM socket,
// with net.ErrClosed after Close, when epoll refuses the descriptor, and
// with the first worker's failure once every worker has failed.
func (e *Epoll) Add(l *contract.Lane) error {
	c, err := epAddCmd(l, e.front.Addable)
	if err != nil {
		return err
	}
	return e.front.Place(l, func(w *epWorker) (uint64, bool, error) {
		c.tok = w.allocSlot()
		ok, err := w.register(&c)
		if err != nil || !ok {
			// !ok: the worker failed since pick looked; it is marked
			// stopped now.
			w.freeSlot(c.tok)
		}
		if err != nil {
			return 0, false, fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), err)
		}
		return c.tok, ok, nil
	})
}

// register adds c's descriptor to the worker's epoll instance and queues the
// add command, or reports false when the worker has stopped. Both happen
// under mu, so the worker cannot close its epoll descriptor (whose number
// another file may then take) meanwhile, and a lane registered here is
// always in the commands that the worker's shutdown finishes.
func (w *epWorker) register(c *epCmd) (bool, error) {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if w.Stopped() {
		return false, nil
	}
	if !c.always {
		// Registered here rather than on the worker so that the error
		// reaches the caller. Readiness that is already there is queued at
		// once; the worker remembers an event that beats the add command.
		ev := epEvent(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLET, c.tok)
		w.ctls.Add(1)
		switch err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); {
		case err == unix.EPERM:
			// Not pollable (a regular file or directory behind a Stream):
			// always readable, like a file.
			c.always = true
		case err != nil:
			return false, os.NewSyscallError("epoll_ctl", err)
		default:
			c.polled = true
		}
	}
	w.AddLoad(1)
	w.e.front.Lanes.Add(1)
	w.PostLocked(*c, w.wake)
	return true, nil
}

// epAddCmd admits l (admit: the runner takes it) and decides how its
// descriptor will be read.
func epAddCmd(l *contract.Lane, admit func(*contract.Lane) error) (epCmd, error) {
	a, err := driver.AdmitDescriptor("fallback: epoll", l, admit)
	if err != nil {
		return epCmd{}, err
	}
	c := epCmd{op: epAdd, lane: l, fd: a.FD, kind: a.Kind, off: a.Offset}
	switch a.How {
	case driver.ReadFile:
		// epoll refuses regular files with EPERM; they never block
		// anyway. A stream behind which a file stands is read like one.
		c.kind, c.always = contract.File, true
		return c, nil
	case driver.ReadSocket:
		// Sockets raise a new edge for every arrival, so a short read
		// proves the socket drained (pipes only do so on recent kernels).
		c.sock = true
	}
	if err := unix.SetNonblock(a.FD, true); err != nil {
		return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), os.NewSyscallError("fcntl", err))
	}
	return c, nil
}
