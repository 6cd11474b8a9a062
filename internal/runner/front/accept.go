package front

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/internal/contract"
	"golang.org/x/sys/unix"
)

func closeFD(fd int) error { return os.NewSyscallError("close", unix.Close(fd)) }

// Accepts is one listener's accepts on an event-loop runner's workers
// (contract.AcceptQueue), written once for the uring and epoll runners: the
// grants, spread over the workers that run by how many each holds, the
// results, and the grants a stopped worker gives back. How a worker
// accepts stays the runner's own.
//
// Every grant yields exactly one result on Ready; the listener's loop
// holds at most Depth grants, so Put never blocks a worker.
type Accepts[W interface {
	comparable
	Worker
}] struct {
	Runner string // in errors: "ring: runner", "fallback: epoll"
	LFD    int    // the runner's duplicate of the listening socket
	Per    []*Acceptor[W]

	// Post sends a worker the command to arm a's grants (stop false) or
	// to stop a's accepts (stop true), and reports false once the worker
	// has stopped. Closed says the runner was closed. DirectClose closes
	// a connection held in a worker's file table (nil: none are).
	Post        func(a *Acceptor[W], stop bool) bool
	Closed      func() bool
	DirectClose func(worker, slot uint32)
	// Concentrate gives every grant to the first running worker of Per
	// rather than spreading them: for a runner that places each accepted
	// connection itself, so that one worker, not all, wakes for the
	// listener.
	Concentrate bool

	ready chan contract.RunnerAccepted
	next  int
	// stopped says Stop was called; stopping is set by Stop once acks
	// counts the workers yet to let go of the socket after it, which
	// Close waits for.
	stopped  atomic.Bool
	stopping atomic.Bool
	acks     sync.WaitGroup
}

// Acceptor is a listener's accepts on one worker.
type Acceptor[W interface {
	comparable
	Worker
}] struct {
	Q     *Accepts[W]
	W     W
	Index int // its place in Per, in errors

	// credit is the grants the worker has yet to use; load is credit
	// plus those in use (an accept armed), which Grant balances.
	credit atomic.Int32
	load   atomic.Int32
	given  bool // Grant's mark: tell the worker
	acked  atomic.Bool

	// Owned by the worker.
	Armed    int  // accepts in flight in the kernel (uring)
	Slot     int  // its place in the worker's list of acceptors, while Listed
	Listed   bool // in the worker's list of acceptors
	Stopping bool // Stop asked: take no grant, give back what is held
}

// NewAccepts makes a listener's accepts on workers ws, depth grants per
// worker, on a duplicate of the listening socket fd that the accepts own
// (the caller keeps fd).
func NewAccepts[W interface {
	comparable
	Worker
}](runner string, fd int, ws []W, depth int) (*Accepts[W], error) {
	lfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: accept: %w", runner, os.NewSyscallError("fcntl", err))
	}
	q := &Accepts[W]{Runner: runner, LFD: lfd, ready: make(chan contract.RunnerAccepted, depth*len(ws))}
	for i, w := range ws {
		q.Per = append(q.Per, &Acceptor[W]{Q: q, W: w, Index: i})
	}
	return q, nil
}

func (q *Accepts[W]) Depth() int                            { return cap(q.ready) }
func (q *Accepts[W]) Ready() <-chan contract.RunnerAccepted { return q.ready }

// Grant gives each of n grants to the running worker that holds the
// fewest, then tells the workers it gave to. A worker that has stopped
// gives its grants back at once; with none running, each grant comes
// back as an error matching net.ErrClosed.
func (q *Accepts[W]) Grant(n int) {
	for ; n > 0; n-- {
		best := -1
		for k := range q.Per {
			i := (q.next + k) % len(q.Per)
			if q.Concentrate {
				i = k
			}
			if a := q.Per[i]; !a.W.Stopped() && (best < 0 || a.load.Load() < q.Per[best].load.Load()) {
				best = i
				if q.Concentrate {
					break
				}
			}
		}
		q.next++
		if best < 0 {
			q.Put(contract.RunnerAccepted{FD: -1, Err: fmt.Errorf("%s: accept: every worker stopped: %w", q.Runner, net.ErrClosed)})
			continue
		}
		a := q.Per[best]
		a.load.Add(1)
		a.credit.Add(1)
		a.given = true
	}
	for _, a := range q.Per {
		if a.given {
			a.given = false
			if !q.Post(a, false) {
				a.Revoke()
			}
		}
	}
}

// Stop asks every worker to stop the listener's accepts and give its
// grants back. Each worker acknowledges (AckStop) once it no longer uses
// the socket.
func (q *Accepts[W]) Stop() {
	if !q.stopped.CompareAndSwap(false, true) {
		return
	}
	// Counted before stopping is seen: a worker whose AckStop sees it
	// (one that let go of the socket for its own close) must find its
	// count there.
	q.acks.Add(len(q.Per))
	q.stopping.Store(true)
	for _, a := range q.Per {
		if !q.Post(a, true) {
			a.Revoke()
			a.AckStop()
		}
	}
}

// Close closes the runner's duplicate of the listening socket, once
// every worker has let go of it after Stop.
func (q *Accepts[W]) Close() error {
	q.acks.Wait()
	if q.LFD < 0 {
		return nil
	}
	fd := q.LFD
	q.LFD = -1
	return closeFD(fd)
}

// CloseDirect implements contract.AcceptQueue.
func (q *Accepts[W]) CloseDirect(worker, slot uint32) {
	if q.DirectClose != nil {
		q.DirectClose(worker, slot)
	}
}

// Put hands a result to the listener's loop. It never waits: every grant
// yields one result, and the loop holds at most Depth grants. A result
// that finds no room breaks that promise; its connection is closed.
func (q *Accepts[W]) Put(res contract.RunnerAccepted) {
	select {
	case q.ready <- res:
	default:
		switch {
		case res.Direct:
			q.CloseDirect(res.Worker, res.Slot)
		case res.FD >= 0:
			closeFD(res.FD)
		}
	}
}

// StopErr is the error of a grant given back or an accept cancelled
// without accepting: the runner closed, or, while it runs, grant again
// (contract.ErrAcceptRetry), to a worker that runs.
func (q *Accepts[W]) StopErr(worker int, why string) error {
	if q.Closed() {
		return fmt.Errorf("%s: accept: %w", q.Runner, net.ErrClosed)
	}
	return fmt.Errorf("%s: accept: worker %d %s: %w", q.Runner, worker, why, contract.ErrAcceptRetry)
}

// Take uses one of a's grants: false when it holds none.
func (a *Acceptor[W]) Take() bool {
	for {
		c := a.credit.Load()
		if c <= 0 {
			return false
		}
		if a.credit.CompareAndSwap(c, c-1) {
			return true
		}
	}
}

// Untake gives back a grant Take took and did not use.
func (a *Acceptor[W]) Untake() { a.credit.Add(1) }

// Done reports the result of a grant in use: the worker's accept ended.
func (a *Acceptor[W]) Done(res contract.RunnerAccepted) {
	a.load.Add(-1)
	a.Q.Put(res)
}

// AckStop tells Close that the worker no longer uses the socket. It
// counts once, and only after Stop: a worker that stops a's accepts for
// its own close before Stop acknowledges when Stop's command reaches it.
func (a *Acceptor[W]) AckStop() {
	if a.Q.stopping.Load() && a.acked.CompareAndSwap(false, true) {
		a.Q.acks.Done()
	}
}

// Revoke gives the grants a holds back, as errors (StopErr).
func (a *Acceptor[W]) Revoke() {
	n := a.credit.Swap(0)
	if n == 0 {
		return
	}
	a.load.Add(-n)
	err := a.Q.StopErr(a.Index, "stopped")
	for ; n > 0; n-- {
		a.Q.Put(contract.RunnerAccepted{FD: -1, Err: err})
	}
}
