package ring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// Ring sizes for runner workers. The SQ takes one turn's submissions (NextSQE
// submits early when it fills); the CQ is larger so that a turn's worth of
// completions for many lanes rarely spills into the kernel's overflow list.
const (
	runnerEntries   = 512
	runnerCQEntries = 4096
)

// user_data layout: PackUserData(slot, tag<<genBits | generation). The tag
// says which operation completed; the generation tells a slot's lanes apart.
const (
	genBits = 28
	genMask = 1<<genBits - 1
)

// opTag names the operation a CQE belongs to.
type opTag uint32

const (
	tagNone   opTag = iota // no operation in flight
	tagWake                // the Waker's eventfd read
	tagPoll                // one-shot POLL_ADD on a lane
	tagRead                // RECV, RECVMSG, READ or READ_FIXED into a lane's buffer
	tagCancel              // ASYNC_CANCEL by fd; its CQE is ignored
)

// Runner is the io_uring runner: RunnerConfig.Workers workers (one when
// zero), each a goroutine locked to its OS thread that owns one ring and one
// [Waker]. Lanes go to the least loaded worker on Add and stay there.
//
// # Reading
//
// A stream socket without data holds no buffer: it has a one-shot POLL_ADD
// (POLLIN|POLLRDHUP) armed. When the poll fires the lane takes a buffer from
// its pool account (TryAcquire, else Account.Wait, whose notification posts
// a grant to the worker) and issues RECV with MSG_DONTWAIT into the free
// tail of the buffer. While a receive returns data and the kernel says more
// is queued (CQEFSockNonempty) or the receive filled the space it was given,
// the next RECV follows at once; a full buffer is emitted and the next one
// acquired at once. A short receive, or EAGAIN, means the socket drained:
// the lane goes back to a poll, keeping a partly filled buffer but
// releasing an empty one.
//
// The receives never wait for readiness (MSG_DONTWAIT), so the kernel refers
// to a lane's buffer only for the instant a receive runs. That is the design
// choice behind flushing: a lane holding partial data waits on a poll, which
// does not touch the buffer, so a flush deadline emits the data with no
// cancel and no round trip. In the rare case a read is still in flight at
// the deadline, the emit waits for its CQE (which cannot be long: no
// operation that references a buffer ever blocks). The alternative, a
// receive armed with RecvPollFirst that sleeps in the kernel holding the
// buffer, saves a CQE per drained burst but makes every flush an
// ASYNC_CANCEL and a wait, and pins buffers in idle lanes.
//
// Regular files (Kind File) need no poll: one READ_FIXED (or READ, when the
// slab could not be registered) is in flight per lane at the current
// offset, advancing, until a read returns 0. Other non-socket streams
// (pipes, character devices) poll like sockets and read with RWF_NOWAIT.
//
// Datagram descriptors (Kind Datagram, SOCK_DGRAM sockets) poll like stream
// sockets when idle, then take one RECVMSG (MSG_DONTWAIT|MSG_TRUNC) per
// datagram into buf[n+4:], and write its length prefix at buf[n:n+4] when it
// has arrived (the framing of srcs.ForEachDatagram). Each slot owns a
// msghdr and an iovec in an off-heap [Arena] of its worker, which outlive
// every operation of the slot's lanes. A datagram is never short, so only
// EAGAIN sends the lane back to its poll. When less room is left than the
// lane's srcs.DatagramLimit, the buffer is emitted (flag Datagrams, and
// Partial unless exactly full). A datagram longer than its room comes back
// truncated: it is dropped, reported to the emitter if it is a
// srcs.DatagramDropReporter, logged once per lane, and the lane keeps
// running.
//
// # Buffers
//
// Each worker registers the pool's slab as fixed buffers. When the kernel
// refuses (RLIMIT_MEMLOCK, 8 MiB without CAP_IPC_LOCK) the worker reads
// files with plain READ, and the runner says so once in its log.
//
// # Threads and commands
//
// Nothing but a worker touches its ring or its lanes. Add, Remove,
// SetPaused, Close and pool grants post commands to the worker's queue and
// call the Waker, whose eventfd read is armed on the ring. A loop turn reaps
// every CQE, re-arms the Waker if it fired, drains the commands, issues
// SQEs for lanes that can make progress, emits partial buffers whose flush
// deadline passed, and makes one io_uring_enter that submits everything and
// sleeps until a completion or the nearest flush deadline.
//
// Remove cancels the lane's operations by descriptor (ASYNC_CANCEL with
// CancelFd|CancelAll), waits for their CQEs, emits partial data, and only
// then reports Finish, after which the runner never touches the descriptor.
//
// # Failures
//
// A worker whose ring fails stops taking lanes (Add passes it over, and
// fails only once every worker has), stops its lanes as Remove does but
// with the failure as their Finish error, and keeps reaping until their
// operations complete, so that bytes a receive already took from a socket
// are emitted. If reads are still in flight when the ring has to close,
// their buffers are leaked, never released or emitted, because the kernel
// may still write into them; the pool then cannot close.
//
// A Runner is safe for concurrent use. It uses each lane's descriptor from
// Add until just before Finish and never closes it.
type Runner struct {
	log     *slog.Logger
	pool    *pool.Pool
	opts    runnerOptions
	workers []*worker
	wg      sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	lanes     map[*srcs.Lane]laneRef // lanes being driven, for Remove
	next      int                    // where the least-loaded search starts
	closeErrs []error
	fatal     error // the first worker failure, for Add once all have failed

	paused      atomic.Bool
	lanesN      atomic.Int64
	threads     atomic.Int64
	noFixedOnce sync.Once
}

// runnerOptions are knobs for tests.
type runnerOptions struct {
	// register registers the slab with a worker's ring; nil means
	// Ring.RegisterBuffers. Tests replace it to force the READ fallback.
	register func(r *Ring, iovs []unix.Iovec) error
	// fault, if set, runs on the worker at the top of every loop turn,
	// before it reaps; a non-nil result is taken as a fatal ring error.
	fault func(w *worker) error
	// quiesce bounds how long a failed worker keeps reaping for its lanes'
	// operations to complete; zero means quiesceTimeout, negative skips it.
	quiesce time.Duration
	// closeRing closes a worker's ring; nil means Ring.Close. Tests make
	// it report operations still in flight.
	closeRing func(r *Ring) error
}

// batchWaitNr is how many completions a batched wait asks for. The time
// bound, not the count, paces a busy worker: the count only ends a wait
// early when a burst would otherwise fill much of the CQ.
const batchWaitNr = runnerCQEntries / 32

// quiesceTimeout is how long a worker that failed waits for the operations
// of its lanes to complete before it closes the ring anyway.
const quiesceTimeout = 5 * time.Second

// laneRef says which worker drives a lane, under which token.
type laneRef struct {
	w   *worker
	tok uint64
}

// NewRunner checks that io_uring can serve the runner here, then starts the
// workers, each of which creates its ring on its own locked thread. It
// returns an error matching [ErrNotSupported] when the kernel lacks
// io_uring or an operation the runner needs, and the first worker's setup
// error otherwise (after stopping the workers that did start).
func NewRunner(cfg srcs.RunnerConfig) (*Runner, error) {
	return newRunner(cfg, runnerOptions{})
}

func newRunner(cfg srcs.RunnerConfig, opts runnerOptions) (*Runner, error) {
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("ring: runner: config: Workers = %d: must not be negative", cfg.Workers)
	}
	if cfg.Pool == nil {
		return nil, errors.New("ring: runner: config: Pool is nil")
	}
	if err := runnerSupported(Probe()); err != nil {
		return nil, err
	}
	if opts.register == nil {
		opts.register = (*Ring).RegisterBuffers
	}
	if opts.quiesce == 0 {
		opts.quiesce = quiesceTimeout
	}
	if opts.closeRing == nil {
		opts.closeRing = (*Ring).Close
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{log: log, pool: cfg.Pool, opts: opts, lanes: map[*srcs.Lane]laneRef{}}
	if cfg.BatchWait < 0 {
		return nil, fmt.Errorf("ring: runner: config: BatchWait = %v: must not be negative", cfg.BatchWait)
	}
	batchWait := cfg.BatchWait
	if p := Probe(); batchWait > 0 && p.Features&FeatMinTimeout == 0 {
		log.Info("ring: runner: batched waits need IORING_FEAT_MIN_TIMEOUT (6.12); workers wake for every completion",
			"kernel", p.Kernel)
		batchWait = 0
	}
	n := max(cfg.Workers, 1)
	for i := range n {
		w := &worker{r: r, id: i, setup: make(chan error, 1), batchWait: batchWait}
		w.onCQE = w.handleCQE
		r.workers = append(r.workers, w)
		r.wg.Go(w.run)
	}
	var errs []error
	for _, w := range r.workers {
		if err := <-w.setup; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		r.Close()
		return nil, errors.Join(errs...)
	}
	log.Debug("ring: runner started", "workers", n)
	return r, nil
}

// runnerSupported says why the runner cannot work with what p found.
func runnerSupported(p ProbeResult) error {
	if !p.Supported {
		if errors.Is(p.Err, ErrNotSupported) {
			return fmt.Errorf("ring: runner: %w", p.Err)
		}
		return &NotSupportedError{Op: "runner", Reason: "io_uring is unusable", Err: p.Err}
	}
	var missing []Op
	for _, op := range [...]Op{OpPollAdd, OpRecv, OpRead, OpReadFixed, OpAsyncCancel} {
		if !p.HasOp(op) {
			missing = append(missing, op)
		}
	}
	switch {
	case len(missing) > 0:
		return &NotSupportedError{Op: "runner", Reason: fmt.Sprintf("kernel %s lacks opcodes %v", p.Kernel, missing)}
	case !p.CancelFd:
		return &NotSupportedError{Op: "runner", Reason: fmt.Sprintf("kernel %s cannot cancel by descriptor (5.19)", p.Kernel)}
	case p.Features&FeatExtArg == 0:
		return &NotSupportedError{Op: "runner", Reason: fmt.Sprintf("kernel %s has no timed waits (IORING_FEAT_EXT_ARG, 5.11)", p.Kernel)}
	}
	return nil
}

// Name returns "uring".
func (r *Runner) Name() string { return "uring" }

// Add hands l to the least loaded worker that has not failed. It fails with
// srcs.ErrNoDescriptor for a source that is no srcs.Descriptor, for a
// datagram descriptor that is no SOCK_DGRAM socket, with net.ErrClosed after
// Close, and with the first worker's failure once every worker has failed.
func (r *Runner) Add(l *srcs.Lane) error {
	if err := checkLane(l); err != nil {
		return err
	}
	ds, ok := l.Src.(srcs.Descriptor)
	if !ok {
		return fmt.Errorf("ring: runner: add lane %d (%s): %w", l.ID, l.Name(), srcs.ErrNoDescriptor)
	}
	// Refuse before touching the source: Desc may detach a connection from
	// the netpoller, which cannot be undone.
	if err := r.addable(l); err != nil {
		return err
	}
	c, err := addCmd(l, ds)
	if err != nil {
		return err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.addableLocked(l); err != nil {
		return err
	}
	for {
		w := r.pick()
		if w == nil {
			if r.fatal == nil {
				return fmt.Errorf("ring: runner: add lane %d: all workers stopped: %w", l.ID, net.ErrClosed)
			}
			return fmt.Errorf("ring: runner: add lane %d: all workers stopped: %w", l.ID, r.fatal)
		}
		idx, gen := w.allocSlot()
		tok := token(idx, gen)
		c.tok = tok
		c.notify = func() { w.post(cmd{op: cmdGrant, tok: tok}) }
		w.load.Add(1)
		r.lanesN.Add(1)
		if w.post(c) {
			r.lanes[l] = laneRef{w, tok}
			return nil
		}
		// The worker failed since pick looked; it is marked stopped now,
		// so the next pick passes it over.
		w.load.Add(-1)
		r.lanesN.Add(-1)
		w.freeSlot(idx)
	}
}

func (r *Runner) addable(l *srcs.Lane) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addableLocked(l)
}

func (r *Runner) addableLocked(l *srcs.Lane) error {
	switch {
	case r.closed:
		return fmt.Errorf("ring: runner: add lane %d: %w", l.ID, net.ErrClosed)
	case r.lanes[l] != (laneRef{}):
		return fmt.Errorf("ring: runner: add lane %d: already added", l.ID)
	}
	return nil
}

// checkLane rejects a lane the runner could not drive.
func checkLane(l *srcs.Lane) error {
	switch {
	case l == nil:
		return errors.New("ring: runner: add: nil lane")
	case l.Src == nil:
		return fmt.Errorf("ring: runner: add lane %d: nil source", l.ID)
	case l.Account == nil:
		return fmt.Errorf("ring: runner: add lane %d: nil account", l.ID)
	case l.Out == nil:
		return fmt.Errorf("ring: runner: add lane %d: nil emitter", l.ID)
	case l.Flush < 0:
		return fmt.Errorf("ring: runner: add lane %d: negative flush timeout %v", l.ID, l.Flush)
	}
	return nil
}

// addCmd reads l's descriptor and decides how it will be read.
func addCmd(l *srcs.Lane, ds srcs.Descriptor) (cmd, error) {
	d, err := ds.Desc()
	if err != nil {
		return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): %w", l.ID, l.Name(), err)
	}
	if d.FD < 0 {
		return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): invalid descriptor %d", l.ID, l.Name(), d.FD)
	}
	c := cmd{op: cmdAdd, lane: l, fd: d.FD, off: d.Offset}
	switch d.Kind {
	case srcs.File:
		if d.Offset < 0 {
			return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): negative offset %d", l.ID, l.Name(), d.Offset)
		}
		c.mode = modeFile
		return c, nil
	case srcs.Stream:
	case srcs.Datagram:
		// MSG_TRUNC would discard stream data, and a seqpacket socket's
		// end would read as an empty datagram.
		switch typ, err := unix.GetsockoptInt(d.FD, unix.SOL_SOCKET, unix.SO_TYPE); {
		case err != nil:
			return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): datagram descriptor: %w", l.ID, l.Name(), os.NewSyscallError("getsockopt", err))
		case typ != unix.SOCK_DGRAM:
			return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): datagram descriptor %d is a socket of type %d, not SOCK_DGRAM: %w", l.ID, l.Name(), d.FD, typ, unix.EPROTOTYPE)
		}
		c.mode = modeDgram
		return c, nil
	default:
		return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): unknown descriptor kind %v", l.ID, l.Name(), d.Kind)
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.FD, &st); err != nil {
		return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): %w", l.ID, l.Name(), os.NewSyscallError("fstat", err))
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		c.mode = modeSock
	case unix.S_IFREG, unix.S_IFBLK:
		// Never "not ready", so a poll would only spin: read it like a
		// File from where its position stands.
		pos, err := unix.Seek(d.FD, 0, io.SeekCurrent)
		if err != nil {
			return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): %w", l.ID, l.Name(), os.NewSyscallError("lseek", err))
		}
		c.mode, c.off = modeFile, pos
	case unix.S_IFDIR:
		return cmd{}, fmt.Errorf("ring: runner: add lane %d (%s): %w", l.ID, l.Name(), unix.EISDIR)
	default:
		c.mode = modeStream
	}
	return c, nil
}

// pick returns the running worker with the fewest lanes, starting the
// search after the last choice so that ties spread round-robin, or nil when
// every worker has stopped. A failed worker has no lanes left, so it would
// otherwise win every pick. Called with r.mu held.
func (r *Runner) pick() *worker {
	var best *worker
	for i := range r.workers {
		w := r.workers[(r.next+i)%len(r.workers)]
		if !w.stopped.Load() && (best == nil || w.load.Load() < best.load.Load()) {
			best = w
		}
	}
	r.next++
	return best
}

// Remove asks l's worker to stop driving it: its operations are cancelled,
// held data is emitted as Partial and Finish(l, srcs.ErrStopped) follows on
// the worker. It does not wait, and is a no-op for a lane that has finished
// or was never added.
func (r *Runner) Remove(l *srcs.Lane) {
	r.mu.Lock()
	ref, ok := r.lanes[l]
	r.mu.Unlock()
	if ok {
		ref.w.post(cmd{op: cmdRemove, tok: ref.tok})
	}
}

// forget drops l from the lane table, unless it was added again meanwhile.
func (r *Runner) forget(l *srcs.Lane, tok uint64) {
	r.mu.Lock()
	if r.lanes[l].tok == tok {
		delete(r.lanes, l)
	}
	r.mu.Unlock()
}

// SetPaused stops (true) or resumes (false) issuing reads on every lane.
// Reads in flight complete and are emitted, polls stay armed, flush
// deadlines still fire, and Remove and Close still work.
func (r *Runner) SetPaused(paused bool) {
	if r.paused.Swap(paused) == paused || paused {
		// Workers check the flag before every read; only resuming has to
		// wake them.
		return
	}
	for _, w := range r.workers {
		w.post(cmd{op: cmdResume})
	}
}

// Close finishes every lane with srcs.ErrStopped, stops the workers, closes
// their rings and Wakers, and waits for them. It is idempotent.
func (r *Runner) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		for _, w := range r.workers {
			w.post(cmd{op: cmdClose})
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.closeErrs...)
}

// Stats returns the runner's counters summed over its workers.
func (r *Runner) Stats() srcs.RunnerStats {
	st := srcs.RunnerStats{
		Runner:  "uring",
		Workers: len(r.workers),
		Threads: int(r.threads.Load()),
		Lanes:   int(r.lanesN.Load()),
	}
	for _, w := range r.workers {
		st.Reads += w.reads.Load()
		st.Waits += w.waits.Load()
		st.Wakeups += w.wakeups.Load()
		st.Enters += w.enters.Load()
		st.Completions += w.cqes.Load()
		st.Syscalls += w.enters.Load() + w.wakeWrites()
	}
	return st
}

// wakeWrites returns the eventfd writes made to wake w. Any goroutine.
func (w *worker) wakeWrites() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waker == nil {
		return 0
	}
	return w.waker.Writes()
}

// sync waits until every worker has handled the commands posted before it
// and submitted the SQEs they led to. Tests use it as a barrier.
func (r *Runner) sync() {
	var chans []chan struct{}
	for _, w := range r.workers {
		ch := make(chan struct{})
		if w.post(cmd{op: cmdSync, done: ch}) {
			chans = append(chans, ch)
		}
	}
	for _, ch := range chans {
		<-ch
	}
}

// cmdOp is what a command asks of a worker.
type cmdOp uint8

const (
	cmdAdd    cmdOp = iota + 1 // start driving a lane
	cmdRemove                  // stop driving a lane
	cmdGrant                   // the pool reserved a buffer for a lane
	cmdResume                  // issue the reads held back by a pause
	cmdClose                   // finish every lane and exit
	cmdSync                    // close done once the SQEs so far are submitted
)

// readMode says how a lane reads.
type readMode uint8

const (
	modeSock   readMode = iota + 1 // poll, then RECV with MSG_DONTWAIT
	modeStream                     // poll, then READ with RWF_NOWAIT (pipes, ttys)
	modeFile                       // READ(_FIXED) at an advancing offset, no poll
	modeDgram                      // poll, then one RECVMSG per datagram, framed
)

// dgramArenaSize is the size of each arena that holds the slots' msghdrs:
// about 900 datagram slots per 64 KiB.
const dgramArenaSize = 64 << 10

// dgramMsg is the kernel-visible part of a datagram receive: it lives in an
// Arena and is owned by one slot, so it outlives any operation in flight.
type dgramMsg struct {
	hdr unix.Msghdr
	iov unix.Iovec
}

// cmd is a command for a worker. Lanes are named by token (slot and
// generation), so commands that arrive after a lane finished (a late grant,
// a second Remove) find nothing and do nothing.
type cmd struct {
	op     cmdOp
	tok    uint64
	lane   *srcs.Lane // cmdAdd, and the fields below
	fd     int
	mode   readMode
	off    int64
	notify func()
	done   chan struct{} // cmdSync
}

func token(idx, gen uint32) uint64           { return uint64(idx)<<32 | uint64(gen) }
func splitToken(tok uint64) (uint32, uint32) { return uint32(tok >> 32), uint32(tok) }

// worker is one event loop. The fields above the owner block are shared
// with other goroutines as noted; the rest belongs to the worker's
// goroutine, which is locked to the thread that owns the ring.
type worker struct {
	r     *Runner
	id    int
	setup chan error // the result of ring setup, sent once
	onCQE func(*CQE) // handleCQE, bound once so reaping allocates nothing

	mu      sync.Mutex
	cmds    []cmd
	stopped atomic.Bool // set under mu; read without it by Runner.pick
	waker   *Waker      // Wake is called under mu, so Close never races it
	gens    []uint32    // generation of each slot, bumped on allocation
	free    []uint32    // free slot indices

	load    atomic.Int64 // lanes assigned, for Runner.pick
	reads   atomic.Uint64
	waits   atomic.Uint64
	wakeups atomic.Uint64
	enters  atomic.Uint64 // the ring's io_uring_enter calls, published each turn
	cqes    atomic.Uint64 // CQEs reaped

	// Owned by the worker goroutine.
	ring   *Ring
	fixed  bool         // the slab is registered: files use READ_FIXED
	iovs   []unix.Iovec // the registered slab, to check a buffer's index
	spare  []cmd        // the other half of the command double buffer
	slots  []*lane      // by slot index
	ready  []*lane      // lanes to advance this turn
	batch  []*lane      // the ready queue being advanced
	parked []*lane      // readable lanes held back by a pause
	heap   []*lane      // lanes holding partial data, by flush deadline
	syncs  []chan struct{}
	msgs   []*dgramMsg // by slot index; nil until a datagram lane uses it
	arenas []*Arena    // where msgs live; closed after the ring
	live   int         // lanes added and not finished
	// batchWait is the latency the worker may add to batch completions
	// (zero: never). readsIssued says this turn queued a read, which may
	// complete at submission: the wait then must not hold it back.
	batchWait   time.Duration
	readsIssued bool
	woken       bool  // the Waker's read completed: re-arm it
	closing     bool  // Close was asked: finish every lane, then exit
	fatal       error // the ring failed; the loop ends
}

// lane is a worker's state for one lane. Slots are reused; the generation
// tells incarnations apart.
type lane struct {
	l      *srcs.Lane
	slot   uint32
	gen    uint32 // zero when the slot is free
	fd     int
	mode   readMode
	off    int64
	notify func() // posts a grant for this incarnation

	buf   *pool.Buf // nil when the lane holds no buffer
	n     int       // bytes of buf that hold data
	first time.Time // arrival of buf's first byte
	want  int       // length of the read in flight

	// dgram is the datagram limit of a modeDgram lane (see
	// srcs.DatagramLimit; capped by the buffer in commit).
	dgram   int
	dropRep srcs.DatagramDropReporter // l.Out's, if it has one
	warned  bool                      // a dropped datagram was logged

	op        opTag // the operation in flight, if any
	readable  bool  // data (or an end) is expected: read rather than poll
	queued    bool  // in the ready queue
	parked    bool  // in the parked list
	waiting   bool  // a pool Wait is pending
	removing  bool  // Remove asked: cancel, then finish
	stopErr   error // what Finish reports once a removed lane's operations end
	cancelled bool  // the cancel SQE was issued
	flushNow  bool  // the flush deadline passed during a read
	hidx      int   // index in the flush heap, or -1
}

func (ln *lane) userData(tag opTag) uint64 {
	return PackUserData(ln.slot, uint32(tag)<<genBits|ln.gen)
}

// allocSlot reserves a slot and returns it with its new generation. Any
// goroutine.
func (w *worker) allocSlot() (idx, gen uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.free); n > 0 {
		idx = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		idx = uint32(len(w.gens))
		w.gens = append(w.gens, 0)
	}
	gen = (w.gens[idx] + 1) & genMask
	if gen == 0 {
		gen = 1 // zero means "free" to the worker
	}
	w.gens[idx] = gen
	return idx, gen
}

// freeSlot returns a slot for reuse. Any goroutine.
func (w *worker) freeSlot(idx uint32) {
	w.mu.Lock()
	w.free = append(w.free, idx)
	w.mu.Unlock()
}

// post queues a command and wakes the worker. It reports false once the
// worker has stopped. Any goroutine, including the worker itself (a buffer
// it releases may be granted to one of its own lanes).
func (w *worker) post(c cmd) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped.Load() {
		return false
	}
	w.cmds = append(w.cmds, c)
	// Wakes coalesce until the worker re-arms, so this rarely writes.
	if err := w.waker.Wake(); err != nil {
		w.r.log.Error("ring: runner: wake", "worker", w.id, "err", err)
	}
	return true
}

func (w *worker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.start(); err != nil {
		w.markStopped() // posts fail from now on; there is no Waker
		w.setup <- err
		return
	}
	w.r.threads.Add(1)
	defer w.r.threads.Add(-1)
	w.setup <- nil
	w.shutdown(w.loop())
}

// start creates the ring, the Waker and the buffer registration on the
// worker's locked thread, and arms the Waker.
func (w *worker) start() error {
	rg, err := New(Config{Entries: runnerEntries, CQEntries: runnerCQEntries})
	if err != nil {
		return fmt.Errorf("ring: runner: worker %d: %w", w.id, err)
	}
	wk, err := NewWaker()
	if err != nil {
		rg.Close()
		return fmt.Errorf("ring: runner: worker %d: %w", w.id, err)
	}
	w.ring = rg
	w.mu.Lock()
	w.waker = wk
	w.mu.Unlock()

	iovs := w.r.pool.Iovecs()
	switch err := w.r.opts.register(rg, iovs); {
	case err == nil:
		w.fixed, w.iovs = true, iovs
	default:
		var me *MemlockError
		level := slog.LevelWarn
		if errors.As(err, &me) {
			level = slog.LevelInfo
		}
		w.r.noFixedOnce.Do(func() {
			w.r.log.Log(context.Background(), level, "ring: runner: fixed buffers unavailable, using READ",
				"err", err, "bytes", len(iovs)*w.r.pool.BufSize())
		})
	}
	if !w.arm() {
		err := w.fatal
		if err == nil {
			err = ErrSQFull
		}
		rg.Close()
		wk.Close()
		return fmt.Errorf("ring: runner: worker %d: arm waker: %w", w.id, err)
	}
	return nil
}

func (w *worker) markStopped() {
	w.mu.Lock()
	w.stopped.Store(true)
	w.mu.Unlock()
}

// arm queues the Waker's eventfd read.
func (w *worker) arm() bool {
	s := w.sqe()
	if s == nil {
		return false
	}
	w.waker.Arm(s)
	s.UserData = PackUserData(0, uint32(tagWake)<<genBits)
	return true
}

// sqe returns a free SQE, submitting to make room when the queue is full.
// It returns nil when none can be had now; a lasting failure sets fatal.
func (w *worker) sqe() *SQE {
	if s := w.ring.GetSQE(); s != nil {
		return s
	}
	s, err := w.ring.NextSQE()
	if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, ErrSQFull) {
		w.fatal = err
	}
	return s
}

// loop runs turns until a close command has finished every lane, or the
// ring fails.
func (w *worker) loop() error {
	for {
		if w.r.opts.fault != nil {
			if err := w.r.opts.fault(w); err != nil {
				return err
			}
		}
		w.cqes.Add(uint64(w.ring.ForEachCQE(w.onCQE)))
		w.enters.Store(w.ring.Enters())
		if w.woken {
			// Re-arm before draining: a command posted after the drain
			// then always finds a read to complete.
			w.woken = false
			if !w.arm() {
				w.woken = true // no SQE to be had: try again next turn
			}
		}
		w.drainCmds()
		if w.fatal != nil {
			return w.fatal
		}
		if w.closing && w.live == 0 {
			return nil
		}
		w.readsIssued = false
		w.advanceReady()
		now := time.Now()
		w.flushDue(now)
		if len(w.syncs) > 0 {
			if _, err := w.ring.Submit(); err != nil {
				return err
			}
			for _, ch := range w.syncs {
				close(ch)
			}
			clear(w.syncs)
			w.syncs = w.syncs[:0]
		}
		if w.fatal != nil {
			return w.fatal
		}
		w.waits.Add(1)
		var err error
		switch {
		case w.woken || len(w.ready) > 0:
			// Only a failure to get an SQE leaves these: the Waker is not
			// armed, or lanes wait to issue. Sleep briefly, not forever.
			_, err = w.ring.SubmitAndWaitTimeout(1, time.Millisecond)
		case w.batchWait > 0 && !w.readsIssued:
			// Load-paced: completions closer together than batchWait
			// share one wake-up; the first after a quiet spell wakes
			// the worker at once.
			timeout := time.Duration(-1)
			if len(w.heap) > 0 {
				timeout = w.heap[0].due().Sub(now)
			}
			_, err = w.ring.SubmitAndWaitBatch(batchWaitNr, w.batchWait, timeout)
		case len(w.heap) > 0:
			_, err = w.ring.SubmitAndWaitTimeout(1, w.heap[0].due().Sub(now))
		default:
			_, err = w.ring.SubmitAndWait(1)
		}
		if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
			return err
		}
	}
}

// handleCQE routes one completion to its lane. Stale completions (a slot
// reused since) and cancel results are dropped.
func (w *worker) handleCQE(c *CQE) {
	slot, g := UnpackUserData(c.UserData)
	tag, gen := opTag(g>>genBits), g&genMask
	switch tag {
	case tagWake:
		w.woken = true
		w.wakeups.Add(1)
		if c.Res < 0 && c.Res != -int32(unix.EINTR) && c.Res != -int32(unix.EAGAIN) && c.Res != -int32(unix.ECANCELED) {
			w.fatal = fmt.Errorf("ring: runner: waker read: %w", unix.Errno(-c.Res))
		}
		return
	case tagCancel:
		return
	}
	if int(slot) >= len(w.slots) {
		return
	}
	ln := w.slots[slot]
	if ln == nil || ln.gen != gen || ln.op != tag {
		return
	}
	ln.op = tagNone
	switch tag {
	case tagPoll:
		w.polled(ln, c.Res)
	case tagRead:
		w.readDone(ln, c.Res, c.Flags)
	}
}

// polled handles a poll completion.
func (w *worker) polled(ln *lane, res int32) {
	if ln.removing {
		w.finish(ln, ln.stopErr)
		return
	}
	if res < 0 {
		switch errno := unix.Errno(-res); errno {
		case unix.ECANCELED, unix.EINTR, unix.EAGAIN:
		default:
			w.finish(ln, srcs.Classify(os.NewSyscallError("poll", errno)))
			return
		}
	} else {
		// POLLIN, or an end (RDHUP, HUP, ERR) that only a read reports.
		ln.readable = true
	}
	w.enqueue(ln)
}

// readDone handles a read completion.
func (w *worker) readDone(ln *lane, res int32, flags CQEFlags) {
	w.reads.Add(1)
	switch {
	case ln.mode == modeDgram && res >= 0:
		w.datagram(ln, int(res))
		if ln.removing {
			w.finish(ln, ln.stopErr)
			return
		}
		// Datagrams are never short: only EAGAIN proves the socket
		// drained.
		ln.readable = true
	case res > 0:
		if ln.mode == modeFile {
			ln.off += int64(res)
		}
		w.commit(ln, int(res))
		if ln.removing {
			w.finish(ln, ln.stopErr)
			return
		}
		// A short read from a socket means it drained; a poll, which
		// checks the level when armed, tells when to read again.
		ln.readable = ln.mode == modeFile || flags&CQEFSockNonempty != 0 || int(res) == ln.want
	case res == 0:
		if ln.removing {
			w.finish(ln, ln.stopErr)
		} else {
			w.finish(ln, io.EOF)
		}
		return
	default:
		if ln.removing {
			w.finish(ln, ln.stopErr)
			return
		}
		switch errno := unix.Errno(-res); errno {
		case unix.EAGAIN:
			ln.readable = ln.mode == modeFile
		case unix.EINTR, unix.ECANCELED:
		default:
			w.finish(ln, srcs.Classify(os.NewSyscallError(ln.mode.opName(), errno)))
			return
		}
	}
	if ln.flushNow {
		ln.flushNow = false
		if ln.n > 0 {
			w.emit(ln, srcs.Partial)
		}
	}
	w.enqueue(ln)
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

// datagram handles a datagram of size bytes received into ln's buffer: it
// frames it, or drops it if it was cut short.
func (w *worker) datagram(ln *lane, size int) {
	if size > ln.want || w.msgs[ln.slot].hdr.Flags&unix.MSG_TRUNC != 0 {
		if !ln.warned {
			ln.warned = true
			w.r.log.Warn("ring: runner: dropped a datagram larger than the buffer space (further drops on this lane are not logged)",
				"lane", ln.l.ID, "source", ln.l.Name(), "size", size, "room", ln.want)
		}
		if ln.dropRep != nil {
			ln.dropRep.DatagramDropped(ln.l, size)
		}
		return
	}
	srcs.PutDatagramHeader(ln.buf.Bytes()[ln.n:], size)
	w.commit(ln, srcs.DatagramHeaderLen+size)
}

// commit records n bytes read into the free tail of ln's buffer, emitting
// it when full, or at once when the lane holds no partial data.
func (w *worker) commit(ln *lane, n int) {
	if ln.n == 0 {
		ln.first = time.Now()
	}
	ln.n += n
	b := ln.buf.Bytes()
	switch {
	case ln.n == len(b):
		w.emit(ln, 0)
	case ln.mode == modeDgram && srcs.DatagramSpace(b, ln.n) < min(ln.dgram, len(b)-srcs.DatagramHeaderLen):
		// The next datagram might not fit.
		w.emit(ln, srcs.Partial)
	case ln.l.Flush <= 0:
		w.emit(ln, srcs.Partial)
	case ln.hidx < 0:
		w.heapPush(ln)
	}
}

// emit hands the held data downstream; ownership of the buffer goes with it.
func (w *worker) emit(ln *lane, flags srcs.Flags) {
	if ln.hidx >= 0 {
		w.heapRemove(ln)
	}
	if ln.mode == modeDgram {
		flags |= srcs.Datagrams
	}
	b, n, first := ln.buf, ln.n, ln.first
	ln.buf, ln.n, ln.first = nil, 0, time.Time{}
	ln.l.Out.Emit(ln.l, b, n, flags, first)
}

func (ln *lane) due() time.Time { return ln.first.Add(ln.l.Flush) }

// enqueue puts ln in the ready queue, to be advanced this turn.
func (w *worker) enqueue(ln *lane) {
	if !ln.queued {
		ln.queued = true
		w.ready = append(w.ready, ln)
	}
}

// advanceReady issues the next operation of every lane in the ready queue.
func (w *worker) advanceReady() {
	batch := w.ready
	w.ready = w.batch[:0]
	for i, ln := range batch {
		if w.fatal != nil {
			w.ready = append(w.ready, batch[i:]...)
			break
		}
		if ln.queued {
			ln.queued = false
			w.advance(ln)
		}
	}
	clear(batch)
	w.batch = batch[:0]
}

// advance issues ln's next operation: a cancel for a lane being removed, a
// poll for a lane with nothing to read, or a read (after taking a buffer).
// A lane with an operation in flight, or waiting for a buffer, waits for
// that to finish.
func (w *worker) advance(ln *lane) {
	if ln.removing {
		if ln.op != tagNone && !ln.cancelled {
			s := w.sqe()
			if s == nil {
				w.enqueue(ln)
				return
			}
			s.PrepCancelFd(ln.fd, CancelAll)
			s.UserData = ln.userData(tagCancel)
			ln.cancelled = true
		}
		return
	}
	if ln.op != tagNone || ln.waiting {
		return
	}
	if !ln.readable {
		if ln.buf != nil && ln.n == 0 {
			// Idle lanes hold no buffer.
			b := ln.buf
			ln.buf = nil
			b.Release()
		}
		s := w.sqe()
		if s == nil {
			w.enqueue(ln)
			return
		}
		s.PrepPollAdd(ln.fd, unix.POLLIN|unix.POLLRDHUP)
		s.UserData = ln.userData(tagPoll)
		ln.op = tagPoll
		return
	}
	if w.r.paused.Load() {
		if ln.buf != nil && ln.n == 0 {
			// A grant that arrived during the pause: the buffer serves the
			// next waiter better, and the resume acquires again.
			b := ln.buf
			ln.buf = nil
			b.Release()
		}
		if !ln.parked {
			ln.parked = true
			w.parked = append(w.parked, ln)
		}
		return
	}
	if ln.buf == nil && !w.acquire(ln) {
		return
	}
	s := w.sqe()
	if s == nil {
		w.enqueue(ln)
		return
	}
	space := ln.buf.Bytes()[ln.n:]
	if ln.mode == modeDgram {
		space = space[srcs.DatagramHeaderLen:]
	}
	ln.want = len(space)
	switch ln.mode {
	case modeSock:
		s.PrepRecv(ln.fd, space, unix.MSG_DONTWAIT, 0)
	case modeDgram:
		// MSG_TRUNC: the result is the datagram's real length, so a
		// datagram longer than space shows as one.
		m := w.msgs[ln.slot]
		m.iov.Base = &space[0]
		m.iov.SetLen(len(space))
		m.hdr = unix.Msghdr{Iov: &m.iov}
		m.hdr.SetIovlen(1)
		s.PrepRecvmsg(ln.fd, &m.hdr, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	case modeStream:
		s.PrepRead(ln.fd, space, 0)
		s.OpFlags = unix.RWF_NOWAIT
	default:
		if idx := ln.buf.Index(); w.fixed && idx < len(w.iovs) && w.iovs[idx].Base == &ln.buf.Bytes()[0] {
			s.PrepReadFixed(ln.fd, space, uint64(ln.off), uint16(idx))
		} else {
			// Not registered, or a buffer from another pool.
			s.PrepRead(ln.fd, space, uint64(ln.off))
		}
	}
	s.UserData = ln.userData(tagRead)
	ln.op = tagRead
	w.readsIssued = true
}

// acquire gives a lane a buffer, or queues it for the next one the pool
// frees and reports false.
func (w *worker) acquire(ln *lane) bool {
	a := ln.l.Account
	b, ok := a.TryAcquire()
	if !ok {
		var err error
		b, ok, err = a.Wait(ln.notify)
		if err != nil {
			w.finish(ln, fmt.Errorf("ring: runner: lane %d: acquire: %w", ln.l.ID, err))
			return false
		}
		if !ok {
			ln.waiting = true
			return false
		}
	}
	ln.buf, ln.n = b, 0
	return true
}

// grant collects a buffer the pool reserved for a waiting lane. Grants may
// be spurious: Claim decides, and a lane left without one keeps waiting.
func (w *worker) grant(ln *lane) {
	if !ln.waiting {
		return
	}
	a := ln.l.Account
	b, ok := a.Claim()
	if !ok {
		var err error
		if b, ok, err = a.Wait(ln.notify); err != nil {
			ln.waiting = false
			w.finish(ln, fmt.Errorf("ring: runner: lane %d: acquire: %w", ln.l.ID, err))
			return
		}
		if !ok {
			return
		}
	}
	ln.waiting = false
	ln.buf, ln.n = b, 0
	w.enqueue(ln)
}

// drainCmds runs the queued commands.
func (w *worker) drainCmds() {
	w.mu.Lock()
	cmds := w.cmds
	w.cmds = w.spare[:0]
	w.mu.Unlock()
	for i := range cmds {
		c := &cmds[i]
		switch c.op {
		case cmdAdd:
			w.add(c)
		case cmdRemove:
			if ln := w.lane(c.tok); ln != nil {
				w.remove(ln)
			}
		case cmdGrant:
			if ln := w.lane(c.tok); ln != nil {
				w.grant(ln)
			}
		case cmdResume:
			for _, ln := range w.parked {
				if ln.parked {
					ln.parked = false
					w.enqueue(ln)
				}
			}
			clear(w.parked)
			w.parked = w.parked[:0]
		case cmdClose:
			w.closing = true
			for _, ln := range w.slots {
				if ln != nil && ln.gen != 0 {
					w.remove(ln)
				}
			}
		case cmdSync:
			w.syncs = append(w.syncs, c.done)
		}
		*c = cmd{} // drop pointers
	}
	w.spare = cmds[:0]
}

// lane returns the live lane with token tok, or nil.
func (w *worker) lane(tok uint64) *lane {
	idx, gen := splitToken(tok)
	if int(idx) >= len(w.slots) {
		return nil
	}
	if ln := w.slots[idx]; ln != nil && ln.gen == gen {
		return ln
	}
	return nil
}

func (w *worker) add(c *cmd) {
	idx, gen := splitToken(c.tok)
	for int(idx) >= len(w.slots) {
		w.slots = append(w.slots, nil)
	}
	ln := w.slots[idx]
	if ln == nil {
		ln = &lane{}
		w.slots[idx] = ln
	}
	*ln = lane{
		l:        c.lane,
		slot:     idx,
		gen:      gen,
		fd:       c.fd,
		mode:     c.mode,
		off:      c.off,
		notify:   c.notify,
		readable: c.mode == modeFile, // files need no poll
		hidx:     -1,
	}
	w.live++
	if c.mode == modeDgram {
		ln.dgram = srcs.DatagramLimit(c.lane.Src, math.MaxInt32)
		ln.dropRep, _ = c.lane.Out.(srcs.DatagramDropReporter)
		if err := w.allocMsg(idx); err != nil {
			w.finish(ln, fmt.Errorf("ring: runner: lane %d: %w", c.lane.ID, err))
			return
		}
	}
	if w.closing {
		w.remove(ln)
		return
	}
	w.enqueue(ln)
}

// allocMsg makes sure slot has its off-heap msghdr. A slot keeps it for
// later lanes, so a worker's arenas grow with its peak number of datagram
// lanes.
func (w *worker) allocMsg(slot uint32) error {
	for int(slot) >= len(w.msgs) {
		w.msgs = append(w.msgs, nil)
	}
	if w.msgs[slot] != nil {
		return nil
	}
	if n := len(w.arenas); n > 0 {
		if m, err := ArenaAlloc[dgramMsg](w.arenas[n-1]); err == nil {
			w.msgs[slot] = m
			return nil
		}
	}
	a, err := NewArena(dgramArenaSize)
	if err != nil {
		return err
	}
	w.arenas = append(w.arenas, a)
	m, err := ArenaAlloc[dgramMsg](a)
	if err != nil {
		return err
	}
	w.msgs[slot] = m
	return nil
}

// remove stops a lane with srcs.ErrStopped.
func (w *worker) remove(ln *lane) { w.stop(ln, srcs.ErrStopped) }

// stop ends a lane with err: at once when nothing is in flight, else after
// the cancel's victims complete.
func (w *worker) stop(ln *lane, err error) {
	if ln.removing {
		return
	}
	ln.removing = true
	ln.stopErr = err
	if ln.op == tagNone {
		w.finish(ln, err)
		return
	}
	w.advance(ln)
}

// finish ends a lane: held data is emitted, an empty buffer returned, a
// pending pool wait withdrawn, and Finish reported. Nothing may be in flight
// for the lane: the kernel must be done with its buffer and descriptor.
func (w *worker) finish(ln *lane, err error) {
	if ln.op != tagNone {
		panic("ring: runner: finishing a lane with an operation in flight")
	}
	if ln.hidx >= 0 {
		w.heapRemove(ln)
	}
	l, tok := ln.l, token(ln.slot, ln.gen)
	b, n, first := ln.buf, ln.n, ln.first
	slot := ln.slot
	flags := srcs.Partial
	if ln.mode == modeDgram {
		flags |= srcs.Datagrams
	}
	*ln = lane{hidx: -1} // the slot is free; queued pointers go stale
	w.freeSlot(slot)
	w.live--
	w.load.Add(-1)
	w.r.lanesN.Add(-1)
	w.r.forget(l, tok)
	switch {
	case n > 0:
		l.Out.Emit(l, b, n, flags, first)
	case b != nil:
		b.Release()
	}
	l.Account.Cancel()
	l.Out.Finish(l, err)
}

// flushDue emits the partial data whose flush deadline has passed. A lane
// with a read in flight emits when the read completes.
func (w *worker) flushDue(now time.Time) {
	for len(w.heap) > 0 {
		ln := w.heap[0]
		if now.Before(ln.due()) {
			return
		}
		if ln.op == tagRead {
			w.heapRemove(ln)
			ln.flushNow = true
			continue
		}
		w.emit(ln, srcs.Partial)
	}
}

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
		w.r.mu.Lock()
		if w.r.fatal == nil {
			w.r.fatal = reason
		}
		w.r.mu.Unlock()
	}
	w.mu.Lock()
	w.stopped.Store(true)
	rest := w.cmds
	w.cmds = nil
	w.mu.Unlock()
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
	if closeErr != nil {
		errs = append(errs, fmt.Errorf("ring: runner: worker %d: %w", w.id, closeErr))
	}
	leaked := 0
	for _, ln := range w.slots {
		if ln == nil || ln.gen == 0 {
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
	if leaked == 0 {
		// The kernel is done with every msghdr. Otherwise a RECVMSG may
		// still write through one: the arenas stay mapped.
		clear(w.msgs)
		for _, a := range w.arenas {
			if err := a.Close(); err != nil {
				errs = append(errs, fmt.Errorf("ring: runner: worker %d: %w", w.id, err))
			}
		}
		w.arenas = nil
	}
	if len(errs) > 0 {
		w.r.mu.Lock()
		w.r.closeErrs = append(w.r.closeErrs, errs...)
		w.r.mu.Unlock()
	}
}

// quiesce stops every lane of a failed worker with reason and keeps routing
// completions through handleCQE until no lane has an operation in flight,
// the ring refuses to work, or opts.quiesce has passed. Reads that
// completed before the failure carry data already taken from the source.
func (w *worker) quiesce(reason error) {
	// What failed was the loop; cancels may still get through.
	w.fatal = nil
	for _, ln := range w.slots {
		if ln != nil && ln.gen != 0 {
			w.stop(ln, reason)
		}
	}
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
	for _, ln := range w.slots {
		if ln != nil && ln.gen != 0 && ln.op != tagNone {
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
	if ln.op != tagRead || ln.buf == nil {
		return false
	}
	ln.buf, ln.n, ln.first = nil, 0, time.Time{}
	return true
}

// The flush heap is a binary min-heap of lanes by flush deadline; each
// lane knows its index so it can leave from the middle.

func (w *worker) heapLess(i, j int) bool { return w.heap[i].due().Before(w.heap[j].due()) }

func (w *worker) heapSwap(i, j int) {
	w.heap[i], w.heap[j] = w.heap[j], w.heap[i]
	w.heap[i].hidx = i
	w.heap[j].hidx = j
}

func (w *worker) heapPush(ln *lane) {
	ln.hidx = len(w.heap)
	w.heap = append(w.heap, ln)
	w.heapUp(ln.hidx)
}

func (w *worker) heapRemove(ln *lane) {
	i, last := ln.hidx, len(w.heap)-1
	if i != last {
		w.heapSwap(i, last)
	}
	w.heap[last] = nil
	w.heap = w.heap[:last]
	ln.hidx = -1
	if i != last {
		w.heapDown(i)
		w.heapUp(i)
	}
}

func (w *worker) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !w.heapLess(i, p) {
			return
		}
		w.heapSwap(i, p)
		i = p
	}
}

func (w *worker) heapDown(i int) {
	for {
		l := 2*i + 1
		if l >= len(w.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(w.heap) && w.heapLess(r, l) {
			m = r
		}
		if !w.heapLess(m, i) {
			return
		}
		w.heapSwap(i, m)
		i = m
	}
}
