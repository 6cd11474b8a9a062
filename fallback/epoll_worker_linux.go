//go:build linux

// The epoll runner's worker: one goroutine locked to its OS thread, which
// owns an epoll instance, an eventfd and the lanes given to it, takes
// commands and runs the loop around epoll_wait.

package fallback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/runner/front"
	"github.com/sluice-io/sluice/internal/runner/mmsg"
	"github.com/sluice-io/sluice/srcs"
)

// epOp is what a command asks of a worker.
type epOp uint8

const (
	epAdd        epOp = iota + 1 // start driving a lane
	epRemove                     // stop driving a lane
	epGrant                      // the pool reserved a buffer for a lane
	epWake                       // just look around (resume after a pause)
	epClose                      // finish every lane and exit
	epFault                      // fail as if epoll_wait had (tests)
	epArm                        // take a listener's grants (epoll_accept_linux.go)
	epStopAccept                 // stop a listener's accepts, give its grants back
)

// epCmd is a command for a worker. Lanes are named by token, so commands
// that arrive after a lane finished (a late grant, a second Remove) find
// nothing and do nothing.
type epCmd struct {
	op   epOp
	tok  uint64
	lane *contract.Lane // epAdd
	fd   int            // epAdd, and the fields below
	kind contract.Kind
	off  int64
	// always marks a descriptor epoll cannot watch: it is always readable.
	always bool
	polled bool        // registered with the worker's epoll instance
	sock   bool        // a socket: a short read means drained
	err    error       // epFault
	acc    *epAcceptor // epArm, epStopAccept
}

// epWorker is one event loop. The fields above the worker-owned block are
// shared with other goroutines as noted; the rest is touched only by the
// worker's goroutine.
type epWorker struct {
	e    *Epoll
	epfd int
	efd  int     // eventfd, closed only under mu with stopped set
	one  [8]byte // the eventfd increment, read-only

	// The command queue, the slots and the load (front.Worker), which
	// other goroutines share with the worker.
	front.Mailbox[epCmd]
	wake func() // wakes the worker if it may sleep; bound once

	sleeping atomic.Bool // the worker may block: posters must write efd
	reads    atomic.Uint64
	waits    atomic.Uint64
	wakeups  atomic.Uint64
	nevents  atomic.Uint64 // readiness events epoll_wait returned
	ctls     atomic.Uint64 // epoll_ctl calls
	accepted atomic.Uint64 // connections accepted in the loop
	accepts  atomic.Uint64 // accept4 calls

	// Owned by the worker goroutine.
	slots front.Slab[epLane] // by slot index
	// host is the lane bookkeeping the uring worker keeps too: the line
	// a turn serves lanes in, the turn's pace, pool acquires and grants,
	// commits and the flush heap (driver.Host).
	host   driver.Host[*epLane]
	events []unix.EpollEvent
	mmsg   *mmsg.Receiver // receives a datagram lane's batches
	drain  [8]byte        // eventfd read buffer
	fault  error          // an injected failure: the loop ends with it
	// acceptors are the listeners whose socket the worker watches, by
	// the slot their readiness events carry; nil where one stopped.
	acceptors []*epAcceptor
}

func newEpWorker(e *Epoll, pace driver.Pace) (*epWorker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fallback: epoll: %w", os.NewSyscallError("epoll_create1", err))
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("fallback: epoll: %w", os.NewSyscallError("eventfd", err))
	}
	w := &epWorker{e: e, epfd: epfd, efd: efd, events: make([]unix.EpollEvent, epMaxEvents), mmsg: mmsg.NewReceiver(epDatagramsPerTurn)}
	w.wake = w.wakeLocked
	w.host.Init(pace, func(tok uint64) { w.post(epCmd{op: epGrant, tok: tok}) }, w.spent, w.service, w.flushDueNow)
	binary.NativeEndian.PutUint64(w.one[:], 1)
	// Level-triggered: the worker reads the counter whenever it fires.
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: epWakeFD}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		w.closeFDs()
		return nil, fmt.Errorf("fallback: epoll: %w", os.NewSyscallError("epoll_ctl", err))
	}
	return w, nil
}

func (w *epWorker) closeFDs() error {
	return errors.Join(os.NewSyscallError("close", unix.Close(w.epfd)), os.NewSyscallError("close", unix.Close(w.efd)))
}

// epEvent builds the epoll registration for a token.
func epEvent(events uint32, tok uint64) unix.EpollEvent {
	return unix.EpollEvent{Events: events, Fd: int32(uint32(tok >> 32)), Pad: int32(uint32(tok))}
}

// epEventToken recovers the token from an event.
func epEventToken(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd))<<32 | uint64(uint32(ev.Pad))
}

// allocSlot reserves a slot and returns its new token. Any goroutine.
func (w *epWorker) allocSlot() uint64 {
	return driver.Token(w.AllocSlot())
}

// freeSlot returns a token's slot for reuse. Any goroutine.
func (w *epWorker) freeSlot(tok uint64) { w.FreeSlot(uint32(tok >> 32)) }

// post queues a command and wakes the worker if it may be asleep. It
// reports false once the worker has stopped. Any goroutine, including the
// worker itself.
func (w *epWorker) post(c epCmd) bool { return w.Post(c, w.wake) }

// wakeLocked writes the eventfd if the worker may be asleep. Called with
// Mu held, so the eventfd cannot be closed (and its number reused)
// meanwhile. The counter cannot overflow: at most one write per sleep.
func (w *epWorker) wakeLocked() {
	if w.sleeping.CompareAndSwap(true, false) {
		w.wakeups.Add(1)
		for {
			if _, err := unix.Write(w.efd, w.one[:]); err != unix.EINTR {
				break
			}
		}
	}
}

// injectFault makes worker i fail with err as if epoll_wait had, for
// tests. It reports false if the worker has stopped already.
func (e *Epoll) injectFault(i int, err error) bool {
	return e.workers[i].post(epCmd{op: epFault, err: err})
}

func (w *epWorker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w.e.front.Threads.Add(1)
	defer w.e.front.Threads.Add(-1)
	err := w.loop()
	w.shutdown(err)
}

// loop runs turns until a close command arrives or epoll_wait fails.
//
// A turn runs the commands, then serves the ready lanes until its reads
// may bring driver.TurnBytes, and emits partial buffers that are due;
// between the two, once it has read that much or emitted
// driver.YieldChunks chunks since it last did, and before a wait that may
// sleep, the worker yields its P to processing (driver.Pace), which then
// takes what was read while it is still in the cache.
func (w *epWorker) loop() error {
	for {
		w.host.Pace.Hold()
		closing := w.drainCmds()
		w.host.Pace.Release()
		if closing {
			return nil
		}
		if w.fault != nil {
			return w.fault
		}
		if w.host.Pace.YieldDue() {
			w.host.Pace.Yield()
		}
		w.host.Pace.Hold()
		if !w.e.front.Paused.Load() {
			// Each lane in line (driver.Line: those whose sockets became
			// readable after a last read that brought little, those
			// draining their sockets, the ready queue) gets one read
			// budget (service), in order, until delivery pauses or the
			// turn's reads may bring driver.TurnBytes; the rest keep
			// their places. A lane whose socket still holds data after
			// its budget is served first next turn (requeue).
			w.host.Serve()
		}
		now := time.Now()
		w.host.FlushDue(now) // flushDueNow each lane due
		w.host.Pace.Release()
		timeout := w.timeout(now)
		if timeout != 0 && w.host.Pace.Pending() {
			w.host.Pace.Yield()
		}
		if timeout != 0 {
			w.sleeping.Store(true)
			if w.Pending() {
				// Posted after the drain but before sleeping was set:
				// nobody wrote the eventfd.
				timeout = 0
			}
		}
		n, err := unix.EpollWait(w.epfd, w.events, timeout)
		w.sleeping.Store(false)
		w.waits.Add(1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return os.NewSyscallError("epoll_wait", err)
		}
		w.nevents.Add(uint64(n))
		for i := range w.events[:n] {
			w.event(&w.events[i])
		}
	}
}

// timeout is the epoll_wait timeout in milliseconds: zero while lanes are
// ready to serve, else until the nearest flush deadline, else forever.
func (w *epWorker) timeout(now time.Time) int {
	if w.host.Lined() > 0 && !w.e.front.Paused.Load() {
		return 0
	}
	wait, flushing := w.host.NextFlush(now)
	if !flushing {
		return -1
	}
	if wait <= 0 {
		return 0
	}
	// Round up: waking early would only loop back here.
	return int((wait + time.Millisecond - 1) / time.Millisecond)
}

// drainCmds runs the queued commands and reports whether one was close.
func (w *epWorker) drainCmds() (closing bool) {
	w.Drain(func(c *epCmd) {
		switch c.op {
		case epClose:
			closing = true
		case epFault:
			w.fault = c.err
		case epGrant:
			w.grant(c.tok)
		case epAdd:
			w.add(c)
		case epRemove:
			if ln := w.lane(c.tok); ln != nil {
				w.finish(ln, srcs.ErrStopped)
			}
		case epArm:
			w.arm(c.acc)
		case epStopAccept:
			w.stopAccept(c.acc)
		}
	})
	return closing
}

// stats returns the worker's counters: it enters the kernel to wait
// (epoll_wait), and makes a system call for every read, wait, wake-up,
// epoll_ctl and accept4.
func (w *epWorker) stats() contract.RunnerStats {
	reads, waits, wakeups := w.reads.Load(), w.waits.Load(), w.wakeups.Load()
	return contract.RunnerStats{
		Reads: reads, Waits: waits, Wakeups: wakeups, Enters: waits,
		Completions: w.nevents.Load(), Syscalls: reads + waits + wakeups + w.ctls.Load() + w.accepts.Load(),
		Accepted: w.accepted.Load(),
	}
}

// slot returns the state for a slot index, growing the table as needed.
func (w *epWorker) slot(idx uint32) *epLane { return w.slots.Get(idx) }

// lane returns the live lane with token tok, or nil.
func (w *epWorker) lane(tok uint64) *epLane {
	if ln := w.slots.Lookup(uint32(tok >> 32)); ln != nil && ln.tok == tok {
		return ln
	}
	return nil
}

func (w *epWorker) add(c *epCmd) {
	ln := w.slot(uint32(c.tok >> 32))
	early, hup := ln.early == c.tok, ln.earlyHup
	*ln = epLane{
		tok:    c.tok,
		fd:     c.fd,
		kind:   c.kind,
		off:    c.off,
		always: c.always,
		polled: c.polled,
		sock:   c.sock,
	}
	if c.kind == contract.Datagram {
		ln.Driver.ResetDatagram(c.lane, c.lane.Flush)
	} else {
		ln.Driver.Reset(c.lane, c.lane.Flush)
	}
	if ln.always || early {
		ln.readable, ln.full = true, ln.always || hup
		w.host.Enqueue(ln)
	}
}
