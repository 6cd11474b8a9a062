package ring

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/runner/front"
	"github.com/sluice-io/sluice/internal/runner/uring"
	"github.com/sluice-io/sluice/pool"
)

// Runner is the io_uring runner: RunnerConfig.Workers workers (one when
// zero), each a goroutine locked to its OS thread that owns one ring and one
// eventfd waker. Lanes go to the least loaded worker on Add and stay there.
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
// Regular files (Kind File) need no poll: up to fileDepth READs are in
// flight per lane at consecutive offsets, each into its own buffer, and are emitted in file
// order until a read returns 0 (see file_linux.go). Other non-socket
// streams (pipes, character devices) poll like sockets and read with
// RWF_NOWAIT.
//
// Datagram descriptors (Kind Datagram, SOCK_DGRAM sockets) poll like stream
// sockets when idle; a readable one is drained with recvmmsg(2)
// (MSG_DONTWAIT|MSG_TRUNC), up to 64 datagrams a call, each into a room of
// the lane's buffer behind its 4-byte length (the framing of
// srcs.ForEachDatagram): a system call of the worker's own, not a ring
// operation, since one call takes what dozens of RECVMSGs would. Only
// EAGAIN, or a batch that comes back short, sends the lane back to its
// poll. When less room is left than the lane's driver.DatagramLimit, the
// buffer is emitted (flag Datagrams, and Partial unless exactly full). A datagram longer than its room comes back
// truncated: it is dropped, reported to the emitter if it is a
// contract.DatagramDropReporter, logged once per lane, and the lane keeps
// running.
//
// # Accepting
//
// A listener's connections are accepted on the workers' rings
// (StartAccept, srcs.Listener.AcceptThrough): every worker keeps up to
// acceptDepth single-shot ACCEPTs armed for each listener, as many as
// the listener grants (at its MaxConns it grants none), each with a
// sockaddr of its own so the connection is named by its peer and Allow
// applies. An accept installs its connection straight into a slot of the
// worker's registered file table, so the connection never has a
// descriptor in the process; when the table is full or off, it accepts a
// descriptor as accept4(2) would (and fails with EMFILE at the limit,
// for the listener to back off). The lane of a connection in a table is
// placed on the worker that accepted it.
//
// # Buffers
//
// Sockets and files are read into the pool buffer their lane holds, with
// plain RECV and READ: the pool is never registered as fixed buffers,
// which would pin all of it and, for page-cached files, saves nothing
// (docs/decisions/0020-no-fixed-buffers.md).
//
// # Threads and commands
//
// Nothing but a worker touches its ring or its lanes. Add, Remove,
// SetPaused, Close and pool grants post commands to the worker's queue and
// call the Waker, whose eventfd read is armed on the ring. A loop turn reaps
// every CQE, re-arms the Waker if it fired, drains the commands, issues
// SQEs for lanes that can make progress, and emits partial buffers whose
// flush deadline passed. A turn that issued reads submits them without
// sleeping (they mostly complete at submission) and, while completions are
// ready, the next turn follows at once. Otherwise one io_uring_enter
// submits what is queued and sleeps until a completion or the nearest
// flush deadline; while several lanes poll and none waits for a buffer, it
// waits up to BatchWait for a batch of their completions, so that the
// busier the worker the more each wake-up does (worker.loop and
// worker.wait; docs/decisions/0005-load-paced-waits.md), and while
// a few stream sockets poll and keep waking it for little, it holds them
// back for up to BatchWait so that each wake-up brings more
// (nextStreamHold).
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
	log     contract.Logger
	pool    *pool.Pool
	cfg     contract.RunnerConfig // what the workers' Pace follows: Inline, Wakeups
	opts    runnerOptions
	workers []*worker
	wg      sync.WaitGroup
	front   front.Front[*worker] // the lanes being driven; add, remove, close

	front.Control[*worker] // Remove, SetPaused, Close and Stats

	fileSlots int // contract.RunnerConfig.FileSlots; resolved when a worker registers its table
}

// runnerOptions are knobs for tests.
type runnerOptions struct {
	// fault, if set, runs on the worker at the top of every loop turn,
	// before it reaps; a non-nil result is taken as a fatal ring error.
	fault func(w *worker) error
	// quiesce bounds how long a failed worker keeps reaping for its lanes'
	// operations to complete; zero means quiesceTimeout, negative skips it.
	quiesce time.Duration
	// closeRing closes a worker's ring; nil means Ring.Close. Tests make
	// it report operations still in flight.
	closeRing func(r *uring.Ring) error
}

// NewRunner checks that io_uring can serve the runner here, then starts the
// workers, each of which creates its ring on its own locked thread. It
// returns an error matching [ErrNotSupported] when the kernel lacks
// io_uring or an operation the runner needs, and the first worker's setup
// error otherwise (after stopping the workers that did start).
func NewRunner(cfg contract.RunnerConfig) (*Runner, error) {
	return newRunner(cfg, runnerOptions{})
}

func newRunner(cfg contract.RunnerConfig, opts runnerOptions) (*Runner, error) {
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("ring: runner: config: Workers = %d: must not be negative", cfg.Workers)
	}
	if cfg.Pool == nil {
		return nil, errors.New("ring: runner: config: Pool is nil")
	}
	if err := runnerSupported(Probe()); err != nil {
		return nil, err
	}
	if opts.quiesce == 0 {
		opts.quiesce = quiesceTimeout
	}
	if opts.closeRing == nil {
		opts.closeRing = (*uring.Ring).Close
	}
	log := cfg.Logger
	if log == nil {
		log = contract.Discard{}
	}
	r := &Runner{log: log, pool: cfg.Pool, cfg: cfg, opts: opts, fileSlots: cfg.FileSlots}
	if cfg.BatchWait < 0 {
		return nil, fmt.Errorf("ring: runner: config: BatchWait = %v: must not be negative", cfg.BatchWait)
	}
	batchWait := cfg.BatchWait
	if p := Probe(); batchWait > 0 && p.Features&uring.FeatMinTimeout == 0 {
		log.Info("ring: runner: batched waits need IORING_FEAT_MIN_TIMEOUT (6.12); workers wake for every completion",
			"kernel", p.Kernel)
		batchWait = 0
	}
	n := max(cfg.Workers, 1)
	for i := range n {
		w := &worker{r: r, id: i, setup: make(chan error, 1), batchWait: batchWait}
		w.SetGenMask(genMask)
		w.onCQE, w.wake = w.handleCQE, w.wakeLocked
		w.host.Init(driver.NewPace(cfg), func(tok uint64) { w.post(cmd{op: cmdGrant, tok: tok}) }, w.spent, w.advance, w.flushDueNow)
		r.workers = append(r.workers, w)
	}
	ops := front.Ops[*worker]{Runner: "uring", Wait: r.wg.Wait, Stats: (*worker).stats}
	ops.Post = func(w *worker, op front.Op, tok uint64) { w.post(cmd{op: frontCmds[op], tok: tok}) }
	r.front = front.Front[*worker]{Name: "ring: runner", Workers: r.workers, Ops: ops}
	r.Control = r.front.Control()
	for _, w := range r.workers {
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
		if errors.Is(p.Err, uring.ErrNotSupported) {
			return fmt.Errorf("ring: runner: %w", p.Err)
		}
		return &uring.NotSupportedError{Op: "runner", Reason: "io_uring is unusable", Err: p.Err}
	}
	var missing []uring.Op
	for _, op := range requiredOps() {
		if !p.hasOp(op) {
			missing = append(missing, op)
		}
	}
	switch {
	case len(missing) > 0:
		return &uring.NotSupportedError{Op: "runner", Reason: fmt.Sprintf("kernel %s lacks opcodes %v", p.Kernel, missing)}
	case !p.CancelFd:
		return &uring.NotSupportedError{Op: "runner", Reason: fmt.Sprintf("kernel %s cannot cancel by descriptor (5.19)", p.Kernel)}
	case p.Features&uring.FeatExtArg == 0:
		return &uring.NotSupportedError{Op: "runner", Reason: fmt.Sprintf("kernel %s has no timed waits (IORING_FEAT_EXT_ARG, 5.11)", p.Kernel)}
	}
	return nil
}

// Add hands l to the least loaded worker that has not failed. It fails with
// srcs.ErrNoDescriptor for a source that is no contract.Descriptor, for a
// datagram descriptor that is no SOCK_DGRAM socket, with net.ErrClosed after
// Close, and with the first worker's failure once every worker has failed.
func (r *Runner) Add(l *contract.Lane) error {
	if l != nil {
		if d, ok := l.Src.(contract.Directed); ok {
			return r.addDirect(l, d)
		}
	}
	c, err := addCmd(l, r.front.Addable)
	if err != nil {
		return err
	}
	return r.front.Place(l, func(w *worker) (uint64, bool, error) { return r.queueAdd(w, l, c) })
}

// queueAdd gives w a slot for l and posts c, the lane's add. ok is false
// when w stopped since it was picked.
func (r *Runner) queueAdd(w *worker, l *contract.Lane, c cmd) (tok uint64, ok bool, err error) {
	idx, gen := w.AllocSlot()
	if idx > slotMask {
		w.FreeSlot(idx)
		return 0, false, fmt.Errorf("ring: runner: add lane %d: worker %d drives %d lanes, its most", l.ID, w.id, slotMask)
	}
	tok = driver.Token(idx, gen)
	c.tok = tok
	w.AddLoad(1)
	r.front.Lanes.Add(1)
	if w.post(c) {
		return tok, true, nil
	}
	// The worker failed since pick looked; it is marked stopped now.
	w.AddLoad(-1)
	r.front.Lanes.Add(-1)
	w.FreeSlot(idx)
	return 0, false, nil
}

// addCmd admits l (admit: the runner takes it) and decides how its
// descriptor will be read.
func addCmd(l *contract.Lane, admit func(*contract.Lane) error) (cmd, error) {
	a, err := driver.AdmitDescriptor("ring: runner", l, admit)
	if err != nil {
		return cmd{}, err
	}
	c := cmd{op: cmdAdd, lane: l, fd: a.FD, off: a.Offset}
	switch a.How {
	case driver.ReadFile:
		c.mode = modeFile
	case driver.ReadDatagrams:
		c.mode = modeDgram
	case driver.ReadSocket:
		c.mode = modeSock
	default:
		c.mode = modeStream
	}
	return c, nil
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
