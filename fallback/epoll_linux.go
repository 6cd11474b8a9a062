//go:build linux

package fallback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/flush"
	"github.com/sluice-io/sluice/srcs"
)

const (
	// epMaxEvents is how many readiness events one epoll_wait returns.
	epMaxEvents = 128
	// epReadsPerTurn caps the reads one lane gets per loop turn, so a hot
	// lane or a file (always readable) cannot starve the others: once the
	// budget is spent the lane goes to the back of the ready queue.
	epReadsPerTurn = 4
	// epDatagramsPerTurn is the same budget for datagram lanes, counted
	// in datagrams, which are mostly far smaller than a stream read.
	epDatagramsPerTurn = 32
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
// Datagram descriptors (SOCK_DGRAM sockets) are read one datagram per
// recvmsg(2) until EAGAIN, into buffers framed as srcs.ForEachDatagram
// reads them; a datagram too large for the room left is dropped, reported
// to the emitter if it is a srcs.DatagramDropReporter, and logged once per
// lane, and the lane keeps running.
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
	log     *slog.Logger
	workers []*epWorker
	wg      sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	lanes     map[*srcs.Lane]epRef // lanes being driven, for Remove
	next      int                  // where the least-loaded search starts
	closeErrs []error
	fatal     error // the first worker failure, for Add once all have failed

	paused  atomic.Bool
	lanesN  atomic.Int64
	threads atomic.Int64
}

// epRef says which worker drives a lane, under which token.
type epRef struct {
	w   *epWorker
	tok uint64
}

// NewEpoll creates the workers' epoll instances and eventfds and starts the
// workers. A zero cfg.Workers means one worker; the engine passes its own
// default.
func NewEpoll(cfg srcs.RunnerConfig) (*Epoll, error) {
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("fallback: epoll: config: Workers = %d: must not be negative", cfg.Workers)
	}
	n := max(cfg.Workers, 1)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Epoll{log: log, lanes: map[*srcs.Lane]epRef{}}
	for range n {
		w, err := newEpWorker(e)
		if err != nil {
			for _, w := range e.workers {
				w.closeFDs()
			}
			return nil, err
		}
		e.workers = append(e.workers, w)
	}
	for _, w := range e.workers {
		e.wg.Go(w.run)
	}
	log.Debug("fallback: epoll runner", "workers", n)
	return e, nil
}

// Name returns "epoll".
func (e *Epoll) Name() string { return "epoll" }

// Add registers l's descriptor with the least loaded worker that has not
// failed. It fails with srcs.ErrNoDescriptor for a source that is no
// srcs.Descriptor, for a datagram descriptor that is no SOCK_DGRAM socket,
// with net.ErrClosed after Close, when epoll refuses the descriptor, and
// with the first worker's failure once every worker has failed.
func (e *Epoll) Add(l *srcs.Lane) error {
	if err := checkLane("epoll", l); err != nil {
		return err
	}
	ds, ok := l.Src.(srcs.Descriptor)
	if !ok {
		return fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), srcs.ErrNoDescriptor)
	}
	// Refuse before touching the source: Desc may detach a connection from
	// the netpoller, which cannot be undone.
	e.mu.Lock()
	closed, dup := e.closed, e.lanes[l] != (epRef{})
	e.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("fallback: epoll: add lane %d: %w", l.ID, net.ErrClosed)
	case dup:
		return fmt.Errorf("fallback: epoll: add lane %d: already added", l.ID)
	}
	c, err := epAddCmd(l, ds)
	if err != nil {
		return err
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return fmt.Errorf("fallback: epoll: add lane %d: %w", l.ID, net.ErrClosed)
	case e.lanes[l] != (epRef{}):
		return fmt.Errorf("fallback: epoll: add lane %d: already added", l.ID)
	}
	for {
		w := e.pick()
		if w == nil {
			if e.fatal == nil {
				return fmt.Errorf("fallback: epoll: add lane %d: all workers stopped: %w", l.ID, net.ErrClosed)
			}
			return fmt.Errorf("fallback: epoll: add lane %d: all workers stopped: %w", l.ID, e.fatal)
		}
		c.tok = w.allocSlot()
		ok, err := w.register(&c)
		if err != nil {
			w.freeSlot(c.tok)
			return fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), err)
		}
		if ok {
			e.lanes[l] = epRef{w, c.tok}
			return nil
		}
		// The worker failed since pick looked; it is marked stopped now,
		// so the next pick passes it over.
		w.freeSlot(c.tok)
	}
}

// register adds c's descriptor to the worker's epoll instance and queues the
// add command, or reports false when the worker has stopped. Both happen
// under mu, so the worker cannot close its epoll descriptor (whose number
// another file may then take) meanwhile, and a lane registered here is
// always in the commands that the worker's shutdown finishes.
func (w *epWorker) register(c *epCmd) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped.Load() {
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
	w.load.Add(1)
	w.e.lanesN.Add(1)
	w.postLocked(*c)
	return true, nil
}

// epAddCmd reads l's descriptor and decides how it will be read.
func epAddCmd(l *srcs.Lane, ds srcs.Descriptor) (epCmd, error) {
	d, err := ds.Desc()
	if err != nil {
		return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), err)
	}
	if d.FD < 0 {
		return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): invalid descriptor %d", l.ID, l.Name(), d.FD)
	}
	c := epCmd{op: epAdd, lane: l, fd: d.FD, kind: d.Kind, off: d.Offset}
	switch d.Kind {
	case srcs.File:
		c.always = true
		return c, nil
	case srcs.Stream:
	case srcs.Datagram:
		if err := checkDatagramSocket(d.FD); err != nil {
			return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), err)
		}
		if err := unix.SetNonblock(d.FD, true); err != nil {
			return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), os.NewSyscallError("fcntl", err))
		}
		return c, nil
	default:
		return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): unknown descriptor kind %v", l.ID, l.Name(), d.Kind)
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.FD, &st); err != nil {
		return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), os.NewSyscallError("fstat", err))
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFBLK, unix.S_IFDIR:
		// epoll refuses these with EPERM; they never block anyway.
		c.always = true
		return c, nil
	case unix.S_IFSOCK:
		// Sockets raise a new edge for every arrival, so a short read
		// proves the socket drained (pipes only do so on recent kernels).
		c.sock = true
	}
	if err := unix.SetNonblock(d.FD, true); err != nil {
		return epCmd{}, fmt.Errorf("fallback: epoll: add lane %d (%s): %w", l.ID, l.Name(), os.NewSyscallError("fcntl", err))
	}
	return c, nil
}

// pick returns the running worker with the fewest lanes, starting the
// search after the last choice so that ties spread round-robin, or nil when
// every worker has stopped. A failed worker has no lanes left, so it would
// otherwise win every pick. Called with e.mu held.
func (e *Epoll) pick() *epWorker {
	var best *epWorker
	for i := range e.workers {
		w := e.workers[(e.next+i)%len(e.workers)]
		if !w.stopped.Load() && (best == nil || w.load.Load() < best.load.Load()) {
			best = w
		}
	}
	e.next++
	return best
}

// Remove asks l's worker to stop driving it: held data is emitted as
// Partial and Finish(l, srcs.ErrStopped) follows on the worker. It does not
// wait, and is a no-op for a lane that has finished or was never added.
func (e *Epoll) Remove(l *srcs.Lane) {
	e.mu.Lock()
	r, ok := e.lanes[l]
	e.mu.Unlock()
	if ok {
		r.w.post(epCmd{op: epRemove, tok: r.tok})
	}
}

// forget drops l from the lane table, unless it was added again meanwhile.
func (e *Epoll) forget(l *srcs.Lane, tok uint64) {
	e.mu.Lock()
	if e.lanes[l].tok == tok {
		delete(e.lanes, l)
	}
	e.mu.Unlock()
}

// SetPaused stops (true) or resumes (false) reading on every lane. Paused
// workers still drain commands, take buffers granted to them and emit
// partial data at its flush deadline; lanes keep their readiness, so
// resuming needs no new edge.
func (e *Epoll) SetPaused(paused bool) {
	if e.paused.Swap(paused) == paused || paused {
		// Workers check the flag before every read; only resuming has to
		// wake them.
		return
	}
	for _, w := range e.workers {
		w.post(epCmd{op: epWake})
	}
}

// Close finishes every lane with srcs.ErrStopped, stops the workers, waits
// for them and closes their epoll instances and eventfds. It is idempotent.
func (e *Epoll) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		for _, w := range e.workers {
			w.post(epCmd{op: epClose})
		}
	}
	e.mu.Unlock()
	e.wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.closeErrs...)
}

// Stats returns the runner's counters summed over its workers.
func (e *Epoll) Stats() srcs.RunnerStats {
	st := srcs.RunnerStats{
		Runner:  "epoll",
		Workers: len(e.workers),
		Threads: int(e.threads.Load()),
		Lanes:   int(e.lanesN.Load()),
	}
	for _, w := range e.workers {
		st.Reads += w.reads.Load()
		st.Waits += w.waits.Load()
		st.Wakeups += w.wakeups.Load()
		st.Completions += w.nevents.Load()
		st.Syscalls += w.reads.Load() + w.waits.Load() + w.wakeups.Load() + w.ctls.Load()
	}
	st.Enters = st.Waits
	return st
}

// epOp is what a command asks of a worker.
type epOp uint8

const (
	epAdd    epOp = iota + 1 // start driving a lane
	epRemove                 // stop driving a lane
	epGrant                  // the pool reserved a buffer for a lane
	epWake                   // just look around (resume after a pause)
	epClose                  // finish every lane and exit
	epFault                  // fail as if epoll_wait had (tests)
)

// epCmd is a command for a worker. Lanes are named by token, so commands
// that arrive after a lane finished (a late grant, a second Remove) find
// nothing and do nothing.
type epCmd struct {
	op   epOp
	tok  uint64
	lane *srcs.Lane // epAdd
	fd   int        // epAdd, and the fields below
	kind srcs.Kind
	off  int64
	// always marks a descriptor epoll cannot watch: it is always readable.
	always bool
	polled bool  // registered with the worker's epoll instance
	sock   bool  // a socket: a short read means drained
	err    error // epFault
}

// epWorker is one event loop. The fields above the worker-owned block are
// shared with other goroutines as noted; the rest is touched only by the
// worker's goroutine.
type epWorker struct {
	e    *Epoll
	epfd int
	efd  int     // eventfd, closed only under mu with stopped set
	one  [8]byte // the eventfd increment, read-only

	mu      sync.Mutex
	cmds    []epCmd
	stopped atomic.Bool // set under mu; read without it by Epoll.pick
	gens    []uint32    // generation of each slot, bumped on allocation
	free    []uint32    // free slot indices

	sleeping atomic.Bool  // the worker may block: posters must write efd
	load     atomic.Int64 // lanes assigned, for Epoll.pick
	reads    atomic.Uint64
	waits    atomic.Uint64
	wakeups  atomic.Uint64
	nevents  atomic.Uint64 // readiness events epoll_wait returned
	ctls     atomic.Uint64 // epoll_ctl calls

	// Owned by the worker goroutine.
	spare   []epCmd
	slots   []*epLane           // by slot index
	ready   []uint64            // tokens of lanes to serve, FIFO
	batch   []uint64            // the ready queue being served this turn
	flushes flush.Heap[*epLane] // lanes holding partial data, by flush deadline
	events  []unix.EpollEvent
	drain   [8]byte // eventfd read buffer
	fault   error   // an injected failure: the loop ends with it
}

// epLane is a worker's state for one lane. Slots are reused; the token
// (index and generation) tells incarnations apart.
type epLane struct {
	f   fill
	tok uint64 // zero when the slot is free
	// early is the token of a readiness event that beat its add command,
	// and earlyHup whether that event reported a hang-up or an error.
	early    uint64
	earlyHup bool

	fd     int
	kind   srcs.Kind
	off    int64  // next pread offset, for files
	always bool   // not pollable: always readable
	polled bool   // registered with the worker's epoll instance
	sock   bool   // a socket: a short read means drained
	notify func() // posts a grant for this incarnation

	readable bool                // an edge was seen and the lane has not hit EAGAIN since
	full     bool                // read until EAGAIN: a short read does not prove drained
	queued   bool                // in the ready queue
	waiting  bool                // a pool Wait is pending
	fl       flush.Mark[*epLane] // the lane's place in the flush heap, while it holds partial data
}

func newEpWorker(e *Epoll) (*epWorker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fallback: epoll: %w", os.NewSyscallError("epoll_create1", err))
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("fallback: epoll: %w", os.NewSyscallError("eventfd", err))
	}
	w := &epWorker{e: e, epfd: epfd, efd: efd, events: make([]unix.EpollEvent, epMaxEvents)}
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
	w.mu.Lock()
	defer w.mu.Unlock()
	var idx uint32
	if n := len(w.free); n > 0 {
		idx = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		idx = uint32(len(w.gens))
		w.gens = append(w.gens, 0)
	}
	w.gens[idx]++
	if w.gens[idx] == 0 {
		w.gens[idx] = 1 // zero means "free" to the worker
	}
	return uint64(idx)<<32 | uint64(w.gens[idx])
}

// freeSlot returns a slot for reuse. Any goroutine.
func (w *epWorker) freeSlot(tok uint64) {
	w.mu.Lock()
	w.free = append(w.free, uint32(tok>>32))
	w.mu.Unlock()
}

// post queues a command and wakes the worker if it may be asleep. It
// reports false once the worker has stopped. Any goroutine, including the
// worker itself (a buffer it releases may be granted to one of its lanes).
func (w *epWorker) post(c epCmd) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped.Load() {
		return false
	}
	w.postLocked(c)
	return true
}

// postLocked queues a command for a worker that has not stopped. Called
// with mu held.
func (w *epWorker) postLocked(c epCmd) {
	w.cmds = append(w.cmds, c)
	if w.sleeping.CompareAndSwap(true, false) {
		w.wakeups.Add(1)
		// Under mu, so the eventfd cannot be closed (and its number
		// reused) meanwhile. The counter cannot overflow: at most one
		// write per sleep.
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

// pending reports whether commands are queued.
func (w *epWorker) pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.cmds) > 0
}

func (w *epWorker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w.e.threads.Add(1)
	defer w.e.threads.Add(-1)
	err := w.loop()
	w.shutdown(err)
}

// loop runs turns until a close command arrives or epoll_wait fails.
func (w *epWorker) loop() error {
	for {
		if w.drainCmds() {
			return nil
		}
		if w.fault != nil {
			return w.fault
		}
		if !w.e.paused.Load() {
			w.serve()
		}
		now := time.Now()
		w.flushDue(now)
		timeout := w.timeout(now)
		if timeout != 0 {
			w.sleeping.Store(true)
			if w.pending() {
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
	if len(w.ready) > 0 && !w.e.paused.Load() {
		return 0
	}
	if w.flushes.Len() == 0 {
		return -1
	}
	_, d := w.flushes.Min()
	wait := d.Sub(now)
	if wait <= 0 {
		return 0
	}
	// Round up: waking early would only loop back here.
	return int((wait + time.Millisecond - 1) / time.Millisecond)
}

// drainCmds runs the queued commands and reports whether one was close.
func (w *epWorker) drainCmds() (closing bool) {
	w.mu.Lock()
	cmds := w.cmds
	w.cmds = w.spare[:0]
	w.mu.Unlock()
	for i := range cmds {
		c := &cmds[i]
		switch c.op {
		case epAdd:
			w.add(c)
		case epRemove:
			if ln := w.lane(c.tok); ln != nil {
				w.finish(ln, srcs.ErrStopped)
			}
		case epGrant:
			w.grant(c.tok)
		case epClose:
			closing = true
		case epFault:
			w.fault = c.err
		}
		*c = epCmd{} // drop the lane pointer
	}
	w.spare = cmds[:0]
	return closing
}

// slot returns the state for a slot index, growing the table as needed.
func (w *epWorker) slot(idx uint32) *epLane {
	for int(idx) >= len(w.slots) {
		w.slots = append(w.slots, nil)
	}
	ln := w.slots[idx]
	if ln == nil {
		ln = &epLane{}
		w.slots[idx] = ln
	}
	return ln
}

// lane returns the live lane with token tok, or nil.
func (w *epWorker) lane(tok uint64) *epLane {
	idx := tok >> 32
	if idx >= uint64(len(w.slots)) {
		return nil
	}
	if ln := w.slots[idx]; ln != nil && ln.tok == tok {
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
	if c.kind == srcs.Datagram {
		ln.f.resetDatagram(c.lane, c.lane.Flush)
	} else {
		ln.f.reset(c.lane, c.lane.Flush)
	}
	tok := c.tok
	ln.notify = func() { w.post(epCmd{op: epGrant, tok: tok}) }
	if ln.always || early {
		ln.readable, ln.full = true, ln.always || hup
		w.enqueue(ln)
	}
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
	if !ln.waiting {
		w.enqueue(ln)
	}
}

func (w *epWorker) enqueue(ln *epLane) {
	if !ln.queued {
		ln.queued = true
		w.ready = append(w.ready, ln.tok)
	}
}

// serve gives each lane that was ready at the start of the turn one read
// budget. Lanes that still have data rejoin the back of the queue.
func (w *epWorker) serve() {
	batch := w.ready
	w.ready = w.batch[:0]
	for i, tok := range batch {
		if w.e.paused.Load() {
			// Keep the rest for the resume; stale tokens are skipped then.
			w.ready = append(w.ready, batch[i:]...)
			break
		}
		ln := w.lane(tok)
		if ln == nil || !ln.queued {
			continue
		}
		ln.queued = false
		w.service(ln)
	}
	w.batch = batch[:0]
}

// service reads a readable lane until EAGAIN, a short socket read, the end
// of its source, a wait for a buffer, or the end of its read budget.
func (w *epWorker) service(ln *epLane) {
	budget := epReadsPerTurn
	if ln.kind == srcs.Datagram {
		budget = epDatagramsPerTurn
	}
	for range budget {
		if w.e.paused.Load() {
			// No new reads; the lane stays readable for the resume.
			break
		}
		if !ln.f.held() && !w.acquire(ln) {
			return
		}
		space := ln.f.space()
		var n int
		var err error
		truncated := false
		if ln.kind == srcs.Datagram {
			n, truncated, err = w.recv(ln, space)
		} else {
			n, err = w.read(ln, space)
		}
		switch {
		case err == unix.EAGAIN:
			ln.readable, ln.full = false, false
			if ln.f.pending() == 0 {
				ln.f.flush() // idle lanes hold no buffer
			}
			return
		case err != nil:
			w.finish(ln, srcs.Classify(os.NewSyscallError(w.readOp(ln), err)))
			return
		case truncated:
			ln.f.drop(n, w.e.log, "epoll")
			continue
		case n == 0 && ln.kind != srcs.Datagram:
			w.finish(ln, io.EOF)
			return
		}
		if ln.kind == srcs.File {
			ln.off += int64(n)
		}
		ln.f.commit(n, time.Now())
		w.holdPartial(ln)
		if ln.sock && !ln.full && n < len(space) {
			// The socket drained; its next arrival raises a new edge.
			ln.readable = false
			return
		}
	}
	w.enqueue(ln)
}

func (w *epWorker) readOp(ln *epLane) string {
	switch ln.kind {
	case srcs.File:
		return "pread"
	case srcs.Datagram:
		return "recvmsg"
	}
	return "read"
}

// recv receives one datagram; see recvDatagram.
func (w *epWorker) recv(ln *epLane, p []byte) (int, bool, error) {
	for {
		n, truncated, err := recvDatagram(ln.fd, p)
		w.reads.Add(1)
		if err != unix.EINTR {
			return n, truncated, err
		}
	}
}

func (w *epWorker) read(ln *epLane, p []byte) (int, error) {
	for {
		var n int
		var err error
		if ln.kind == srcs.File {
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
	a := ln.f.l.Account
	b, ok := a.TryAcquire()
	if !ok {
		var err error
		b, ok, err = a.Wait(ln.notify)
		if err != nil {
			w.finish(ln, fmt.Errorf("fallback: epoll: lane %d: acquire: %w", ln.f.l.ID, err))
			return false
		}
		if !ok {
			ln.waiting = true
			return false
		}
	}
	ln.f.hold(b)
	return true
}

// grant collects a buffer the pool reserved for a waiting lane. Grants may
// be spurious: Claim decides, and a lane left without one keeps waiting.
func (w *epWorker) grant(tok uint64) {
	ln := w.lane(tok)
	if ln == nil || !ln.waiting {
		return
	}
	a := ln.f.l.Account
	b, ok := a.Claim()
	if !ok {
		var err error
		if b, ok, err = a.Wait(ln.notify); err != nil {
			w.finish(ln, fmt.Errorf("fallback: epoll: lane %d: acquire: %w", ln.f.l.ID, err))
			return
		}
		if !ok {
			return
		}
	}
	ln.waiting = false
	if w.e.paused.Load() {
		// Not to be read into before the resume: the buffer serves the
		// next waiter better. The lane stays readable and queued, so the
		// resume acquires again.
		b.Release()
		w.enqueue(ln)
		return
	}
	ln.f.hold(b)
	w.enqueue(ln) // readable: it was when it asked
}

// holdPartial keeps ln in the flush heap, at its current deadline, while
// it holds partial data, and out of it otherwise. A commit that filled one
// buffer and started the next moves the deadline: Fix keeps the heap
// ordered.
func (w *epWorker) holdPartial(ln *epLane) {
	due, ok := ln.f.due()
	switch {
	case !ok:
		w.flushes.Remove(&ln.fl)
	case !ln.fl.In():
		w.flushes.Push(&ln.fl, ln, due)
	case !ln.fl.Due().Equal(due):
		w.flushes.Fix(&ln.fl, due)
	}
}

// flushDue emits the partial data whose flush deadline has passed.
func (w *epWorker) flushDue(now time.Time) {
	for w.flushes.Len() > 0 {
		ln, due := w.flushes.Min()
		if ln.f.flushIfDue(now) {
			w.flushes.Remove(&ln.fl)
			continue
		}
		if d, ok := ln.f.due(); !ok || !d.Equal(due) {
			// Its data left, or its deadline moved, on a path that did not
			// say so: put it right rather than wake for nothing.
			w.holdPartial(ln)
			continue
		}
		return
	}
}

// finish ends a lane: it leaves the epoll set before Finish, because the
// engine closes the descriptor right after.
func (w *epWorker) finish(ln *epLane, err error) {
	if ln.polled {
		w.ctls.Add(1)
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, ln.fd, nil)
	}
	w.flushes.Remove(&ln.fl)
	l, tok := ln.f.l, ln.tok
	f := ln.f
	*ln = epLane{} // the slot is free; queued tokens go stale
	w.freeSlot(tok)
	w.load.Add(-1)
	w.e.lanesN.Add(-1)
	w.e.forget(l, tok)
	f.finish(err)
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
		w.e.mu.Lock()
		if w.e.fatal == nil {
			w.e.fatal = reason
		}
		w.e.mu.Unlock()
	}
	w.mu.Lock()
	w.stopped.Store(true)
	rest := w.cmds
	w.cmds = nil
	w.mu.Unlock()
	for i := range rest {
		if rest[i].op == epAdd {
			w.add(&rest[i])
		}
	}
	for _, ln := range w.slots {
		if ln != nil && ln.tok != 0 {
			w.finish(ln, reason)
		}
	}
	// post checks stopped under mu, so nobody writes the eventfd now.
	if err := errors.Join(cause, w.closeFDs()); err != nil {
		w.e.mu.Lock()
		w.e.closeErrs = append(w.e.closeErrs, fmt.Errorf("fallback: epoll: worker: %w", err))
		w.e.mu.Unlock()
	}
}
