// The uring runner's worker: one goroutine locked to its OS thread, which
// owns a ring and the lanes given to it, and runs the loop that reaps
// completions, takes commands and submits the next operations.

package ring

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/runner/front"
	"github.com/sluice-io/sluice/internal/runner/mmsg"
	"github.com/sluice-io/sluice/internal/runner/uring"
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
type opTag uint8

const (
	tagNone   opTag = iota // no operation in flight
	tagWake                // the Waker's eventfd read
	tagPoll                // one-shot POLL_ADD on a lane
	tagRead                // RECV, RECVMSG or READ into a lane's buffer
	tagCancel              // ASYNC_CANCEL by fd; its CQE is ignored
)

// batchWaitNr is how many completions a batched wait asks for. The time
// bound, not the count, paces a busy worker: the count only ends a wait
// early when a burst would otherwise fill much of the CQ.
const batchWaitNr = runnerCQEntries / 32

// wakeWrites returns the eventfd writes made to wake w. Any goroutine.
// stats returns the worker's counters; every enter is a system call,
// and so is every write that woke the worker.
func (w *worker) stats() contract.RunnerStats {
	enters := w.enters.Load()
	return contract.RunnerStats{
		Reads: w.reads.Load(), Waits: w.waits.Load(), Wakeups: w.wakeups.Load(),
		Enters: enters, Completions: w.cqes.Load(), Syscalls: enters + w.wakeWrites() + w.recvmmsg.Load(),
		DirectFiles: int(w.files.used.Load()), Accepted: w.accepted.Load(),
	}
}

func (w *worker) wakeWrites() uint64 {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	if w.waker == nil {
		return 0
	}
	return w.waker.Writes()
}

// cmdOp is what a command asks of a worker.
type cmdOp uint8

const (
	cmdAdd        cmdOp = iota + 1 // start driving a lane
	cmdRemove                      // stop driving a lane
	cmdGrant                       // the pool reserved a buffer for a lane
	cmdResume                      // issue the reads held back by a pause
	cmdClose                       // finish every lane and exit
	cmdSync                        // close done once the SQEs so far are submitted
	cmdArm                         // arm a listener's granted accepts (accept_linux.go)
	cmdStopAccept                  // cancel a listener's accepts, give its grants back
	cmdCloseSlot                   // close an accepted connection no lane took (tok: its file slot)
)

// frontCmds are the commands the runner's front posts for its ops.
var frontCmds = [...]cmdOp{front.OpRemove: cmdRemove, front.OpResume: cmdResume, front.OpStop: cmdClose}

// cmd is a command for a worker. Lanes are named by token (slot and
// generation), so commands that arrive after a lane finished (a late grant,
// a second Remove) find nothing and do nothing.
type cmd struct {
	op     cmdOp
	tok    uint64
	lane   *contract.Lane // cmdAdd, and the fields below
	fd     int
	mode   readMode
	off    int64         // where a file lane starts reading
	direct bool          // cmdAdd: fd is a slot of w's table, which the lane takes
	acc    *acceptor     // cmdArm, cmdStopAccept
	done   chan struct{} // cmdSync
}

// worker is one event loop. The fields above the owner block are shared
// with other goroutines as noted; the rest belongs to the worker's
// goroutine, which is locked to the thread that owns the ring.
type worker struct {
	r     *Runner
	id    int
	setup chan error       // the result of ring setup, sent once
	onCQE func(*uring.CQE) // handleCQE, bound once so reaping allocates nothing

	// The command queue, the slots and the load (front.Worker), which
	// other goroutines share with the worker.
	front.Mailbox[cmd]
	waker *uring.Waker // Wake is called under Mu, so Close never races it
	wake  func()       // wakes the worker; bound once, so posting allocates nothing

	reads    atomic.Uint64
	waits    atomic.Uint64
	wakeups  atomic.Uint64
	enters   atomic.Uint64 // the ring's io_uring_enter calls, published each turn
	cqes     atomic.Uint64 // CQEs reaped
	accepted atomic.Uint64 // connections accepted on the ring
	recvmmsg atomic.Uint64 // datagram batches received outside the ring

	// Owned by the worker goroutine.
	ring  *uring.Ring
	slots front.Slab[lane] // by slot index
	// host is the lane bookkeeping the epoll worker keeps too: the line
	// a turn serves lanes in, the turn's pace, pool acquires and grants,
	// commits and the flush heap (driver.Host).
	host      driver.Host[*lane]
	parked    []*lane // readable lanes held back by a pause
	syncs     []chan struct{}
	mmsg      *mmsg.Receiver // receives datagram lanes' batches with recvmmsg(2)
	moreReady bool           // a lane read this turn is still readable: turn again at once
	files     fileTable      // accepted connections' sockets, as direct descriptors
	live      int            // lanes added and not finished
	// The listeners' accepts on this worker (accept_linux.go): those with
	// accepts armed or granted, the records of armed accepts by index,
	// free records, and the number armed.
	acceptors  []*acceptor
	acceptOps  []*acceptOp
	acceptFree []uint32
	accepting  int
	// batchWait is the latency the worker may add to batch completions
	// (zero: never). readsIssued says this turn queued a read, which may
	// complete at submission: the wait then must not hold it back.
	batchWait   time.Duration
	readsIssued bool
	// polling counts the lanes with a poll in flight. A batched wait
	// holds back every completion, the Waker's too, so it is used only
	// while several lanes poll, or a few stream sockets do, and none waits
	// for a grant (host.Starved).
	polling int
	// pollingStreams counts the polls of stream sockets among them.
	pollingStreams int
	// cycleBytes counts what stream sockets brought since the worker
	// last woke from a wait, and streamHold is how long a wait may hold
	// back a few polling stream lanes (see nextStreamHold).
	cycleBytes int64
	streamHold time.Duration
	woken      bool  // the Waker's read completed: re-arm it
	closing    bool  // Close was asked: finish every lane, then exit
	fatal      error // the ring failed; the loop ends
	failure    error // why quiesce stopped the lanes: their Finish error
}

// lane is a worker's state for one lane. Slots are reused; the generation
// tells incarnations apart. A worker keeps one for every connection it
// drives, most of them idle, so the fields are as small as their values
// allow and the rarely used ones live elsewhere: a framed or datagram
// lane's state in the driver, a file lane's read-ahead in fa, a lane's
// grant notification made on its first pool wait, and a failed worker's
// reason on the worker. The worker allocates them in slabs (front.Slab).
type lane struct {
	// Seat is what the host keeps of the lane: its driver (the buffer,
	// the framing and the emit rules of internal/runner/driver; Driver.Lane() is
	// the engine's lane), its place in the flush heap and in line, its
	// pool wait, and in Last what its last read brought or, while a read
	// is in flight, what it asked for.
	driver.Seat[*lane]

	fa *fileAhead // a file lane's read-ahead (for modeFileSeq, fa.next alone: its next read's offset); nil for other lanes

	slot uint32
	gen  uint32 // zero when the slot is free
	fd   int32
	mode readMode
	op   opTag // the operation in flight, if any (tagRead for a file lane's reads)

	readable  bool // data (or an end) is expected: read rather than poll
	parked    bool // in the parked list
	fixed     bool // fd is a slot of the worker's file table (files_linux.go)
	owned     bool // the worker closes fd when the lane ends (contract.HandOff)
	removing  bool // Remove asked: cancel, then finish
	failed    bool // removed because the worker failed: Finish reports w.failure
	cancelled bool // the cancel SQE was issued
	flushNow  bool // the flush deadline passed during a read
}

// lane returns the engine's lane that ln drives.
func (ln *lane) lane() *contract.Lane { return ln.Driver.Lane() }

// stopErr is what Finish reports once a removed lane's operations end.
func (w *worker) stopErr(ln *lane) error {
	if ln.failed {
		return w.failure
	}
	return srcs.ErrStopped
}

func (ln *lane) userData(tag opTag) uint64 {
	return uring.PackUserData(ln.slot, uint32(tag)<<genBits|ln.gen)
}

// post queues a command and wakes the worker. It reports false once the
// worker has stopped. Any goroutine, including the worker itself.
func (w *worker) post(c cmd) bool { return w.Post(c, w.wake) }

// wakeLocked wakes the worker; Post calls it under Mu. Wakes coalesce
// until the worker re-arms, so this rarely writes.
func (w *worker) wakeLocked() {
	if err := w.waker.Wake(); err != nil {
		w.r.log.Error("ring: runner: wake", "worker", w.id, "err", err)
	}
}

func (w *worker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.start(); err != nil {
		w.Stop(nil) // posts fail from now on; there is no Waker
		w.setup <- err
		return
	}
	w.r.front.Threads.Add(1)
	defer w.r.front.Threads.Add(-1)
	w.setup <- nil
	w.shutdown(w.loop())
}

// start creates the ring and the Waker on the worker's locked thread, and
// arms the Waker.
func (w *worker) start() error {
	rg, err := uring.New(uring.Config{Entries: runnerEntries, CQEntries: runnerCQEntries})
	if err != nil {
		return fmt.Errorf("ring: runner: worker %d: %w", w.id, err)
	}
	wk, err := uring.NewWaker()
	if err != nil {
		rg.Close()
		return fmt.Errorf("ring: runner: worker %d: %w", w.id, err)
	}
	w.ring = rg
	w.Mu.Lock()
	w.waker = wk
	w.Mu.Unlock()

	if !w.arm() {
		err := w.fatal
		if err == nil {
			err = uring.ErrSQFull
		}
		rg.Close()
		wk.Close()
		return fmt.Errorf("ring: runner: worker %d: arm waker: %w", w.id, err)
	}
	return nil
}

// arm queues the Waker's eventfd read.
func (w *worker) arm() bool {
	s := w.sqe()
	if s == nil {
		return false
	}
	w.waker.Arm(s)
	s.UserData = uring.PackUserData(0, uint32(tagWake)<<genBits)
	return true
}

// sqe returns a free SQE, submitting to make room when the queue is full.
// It returns nil when none can be had now; a lasting failure sets fatal.
func (w *worker) sqe() *uring.SQE {
	if s := w.ring.GetSQE(); s != nil {
		return s
	}
	s, err := w.ring.NextSQE()
	if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, uring.ErrSQFull) {
		w.fatal = err
	}
	return s
}

// loop runs turns until a close command has finished every lane, or the
// ring fails.
//
// A turn reaps every completion and runs the commands (reap), then issues
// the next operations (issue). Reads a turn issued are submitted without
// sleeping (SubmitNowait), and while that leaves completions to reap, the
// next turn follows at once: a receive from a busy socket or a page-cache
// read completes at submission, so a busy worker runs turn after turn
// without waiting and without giving up its P. Only when nothing is ready
// does it wait in the kernel.
//
// A turn's reads bring at most about driver.TurnBytes, and between reaping
// and issuing, once it has read that much or emitted driver.YieldChunks
// chunks since it last did, the worker yields its P (driver.Pace) so that
// processing takes what it read while the bytes are still in the cache,
// and releases their buffers before the next reads take buffers again. It
// yields before it waits, too. Each yield of a locked thread costs two
// context switches, so it is paid once per batch, not once per chunk; and
// never when processing runs inside Emit (contract.RunnerConfig.Inline),
// where nothing waits for it.
func (w *worker) loop() error {
	for {
		// Processing is woken once a phase, not once a chunk: each hold
		// ends before the worker yields or waits.
		w.host.Pace.Hold()
		exit, err := w.reap()
		w.host.Pace.Release()
		if exit || err != nil {
			return err
		}
		if w.host.Pace.YieldDue() {
			w.host.Pace.Yield()
		}
		w.host.Pace.Hold()
		now, err := w.issue()
		w.host.Pace.Release()
		if err != nil {
			return err
		}
		ready := false
		if w.readsIssued {
			// Reads usually complete at submission; polls and the rest
			// usually do not, and go in with the wait below.
			if _, err := w.ring.SubmitNowait(); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
				return err
			}
			ready = w.ring.CQReady() > 0
		}
		if w.moreReady {
			ready, w.moreReady = true, false
		}
		if ready {
			continue
		}
		if w.host.Pace.Pending() {
			w.host.Pace.Yield()
		}
		if err := w.wait(now); err != nil {
			return err
		}
	}
}

// reap reaps every CQE and runs the commands. exit says the worker is
// done.
func (w *worker) reap() (exit bool, err error) {
	if w.r.opts.fault != nil {
		if err := w.r.opts.fault(w); err != nil {
			return true, err
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
		return true, w.fatal
	}
	return w.closing && w.live == 0 && w.accepting == 0, nil
}

// issue issues the next operations of the ready lanes and emits partial
// buffers that are due.
func (w *worker) issue() (now time.Time, err error) {
	w.readsIssued = false
	w.advanceReady()
	now = time.Now()
	w.host.FlushDue(now) // flushDueNow each lane due
	if len(w.syncs) > 0 {
		if _, err := w.ring.Submit(); err != nil {
			return now, err
		}
		for _, ch := range w.syncs {
			close(ch)
		}
		clear(w.syncs)
		w.syncs = w.syncs[:0]
	}
	return now, w.fatal
}

// wait submits what the turn queued and sleeps in the kernel until a
// completion, the nearest flush deadline, or, when busy, a batch. How it
// sleeps is planWait's choice.
func (w *worker) wait(now time.Time) error {
	w.waits.Add(1)
	if w.fewStreams() {
		w.streamHold = nextStreamHold(w.streamHold, w.cycleBytes, w.r.pool.BufSize(), w.batchWait)
	} else {
		w.streamHold = 0
	}
	w.cycleBytes = 0
	flush, flushing := w.host.NextFlush(now)
	p := planWait(waitState{
		stuck:       w.woken || w.host.Lined() > 0,
		readsIssued: w.readsIssued,
		starved:     w.host.Starved,
		polling:     w.polling,
		fewStreams:  w.fewStreams(),
		batchWait:   w.batchWait,
		streamHold:  w.streamHold,
		flush:       flush,
		flushing:    flushing,
	})
	var err error
	switch {
	case p.batch > 0:
		_, err = w.ring.SubmitAndWaitBatch(p.n, p.batch, p.timeout)
	case p.timeout >= 0:
		_, err = w.ring.SubmitAndWaitTimeout(p.n, p.timeout)
	default:
		_, err = w.ring.SubmitAndWait(p.n)
	}
	if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
		return err
	}
	return nil
}

// fewStreams reports whether fewer lanes poll than a batch asks for, all
// of them stream sockets (a datagram socket is never held: it drops what
// its receive buffer cannot hold).
func (w *worker) fewStreams() bool {
	return w.batchWait > 0 && w.polling > 0 && w.polling < batchWaitNr && w.pollingStreams == w.polling
}

// waitState is what a worker's wait depends on.
type waitState struct {
	stuck       bool // the Waker is not armed, or lanes wait for an SQE
	readsIssued bool // this turn issued reads, which may complete at once
	starved     int  // lanes waiting for a pool buffer
	polling     int  // polls in flight
	fewStreams  bool // see worker.fewStreams
	batchWait   time.Duration
	streamHold  time.Duration
	flush       time.Duration // until the nearest flush deadline, if flushing
	flushing    bool          // some lane holds partial data
}

// waitPlan is how a worker waits: for n completions, at most timeout
// (negative: no limit), and when batch is positive, for up to batch
// before it settles for fewer than n (Ring.SubmitAndWaitBatch).
type waitPlan struct {
	n       uint32
	batch   time.Duration
	timeout time.Duration
}

// planWait chooses how a worker waits. A batched wait holds back every
// completion, the Waker's too, so it is used only while no lane waits for
// a pool grant, no read may be ready at once, and several lanes poll, or
// a few stream sockets do.
func planWait(s waitState) waitPlan {
	timeout := time.Duration(-1)
	if s.flushing {
		timeout = s.flush
	}
	batching := s.batchWait > 0 && !s.readsIssued && s.starved == 0
	switch {
	case s.stuck:
		// Only a failure to get an SQE leaves these: sleep briefly, not
		// forever.
		return waitPlan{n: 1, timeout: time.Millisecond}
	case batching && s.fewStreams && s.streamHold > 0:
		// A few stream sockets poll, and they keep bringing less than
		// the worker could take in one wake-up: ask for a batch they
		// cannot fill, so the wait lasts streamHold and the sockets
		// gather more meanwhile. A completion after a quiet spell of
		// streamHold still wakes the worker at once.
		return waitPlan{n: uint32(s.polling + 1), batch: s.streamHold, timeout: timeout}
	case batching && s.polling > 1:
		// Load-paced: completions closer together than batchWait share
		// one wake-up; the first after a quiet spell wakes the worker at
		// once. The batch is never larger than the polls that could fill
		// it, so that busy streams are not held back waiting for others.
		return waitPlan{n: uint32(min(s.polling, batchWaitNr)), batch: s.batchWait, timeout: timeout}
	}
	return waitPlan{n: 1, timeout: timeout}
}

// Bounds of a stream hold (nextStreamHold): the shortest hold worth a
// wait of its own, and the bytes, in buffers, that one wake-up should
// bring.
const (
	streamHoldMin  = 50 * time.Microsecond
	streamHoldLow  = 8
	streamHoldHigh = 32
)

// nextStreamHold adapts how long a wait may hold back a worker's few
// polling stream lanes, given the hold so far and the bytes the stream
// sockets brought since the last wait. A worker that waits has caught up
// with its lanes; when each wake-up brings less than streamHoldLow
// buffers, it pays a wake-up, a yield to processing and a poll for
// little, so the hold doubles, from streamHoldMin up to batchWait. When
// one brings more than streamHoldHigh buffers it halves, down to none:
// streams fast enough to keep the worker busy are not held back. What
// piles up in the sockets during a hold is about what one wake-up reads;
// a sender that fills a receive buffer meanwhile is slowed by TCP's flow
// control, and loses nothing. Why the hold and its bounds are what they
// are: docs/decisions/0006-few-streams-held.md and 0017.
func nextStreamHold(hold time.Duration, bytes int64, bufSize int, batchWait time.Duration) time.Duration {
	switch {
	case bytes < streamHoldLow*int64(bufSize):
		return min(batchWait, max(2*hold, streamHoldMin))
	case bytes > streamHoldHigh*int64(bufSize):
		if hold /= 2; hold < streamHoldMin {
			return 0
		}
	}
	return hold
}

// handleCQE routes one completion to its lane. Stale completions (a slot
// reused since) and cancel results are dropped.
func (w *worker) handleCQE(c *uring.CQE) {
	slot, g := uring.UnpackUserData(c.UserData)
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
	case tagAccept:
		w.acceptDone(slot, c.Res)
		return
	}
	idx := int(slot >> fileIdxShift)
	slot &= slotMask
	ln := w.slots.Lookup(slot)
	if ln == nil || ln.gen != gen {
		return
	}
	if tag == tagFileRead {
		if ln.mode == modeFile && ln.op == tagRead && idx < fileDepth {
			w.fileDone(ln, idx, c.Res)
		}
		return
	}
	if ln.op != tag {
		return
	}
	ln.op = tagNone
	switch tag {
	case tagPoll:
		w.polling--
		if ln.mode == modeSock {
			w.pollingStreams--
		}
		w.polled(ln, c.Res)
	case tagRead:
		w.readDone(ln, c.Res, c.Flags)
	}
}

// drainCmds runs the queued commands.
func (w *worker) drainCmds() { w.Drain(w.runCmd) }

// runCmd runs one command.
func (w *worker) runCmd(c *cmd) {
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
				w.host.Readable(ln, ln.mode == modeSock)
			}
		}
		clear(w.parked)
		w.parked = w.parked[:0]
	case cmdClose:
		w.closing = true
		for ln := range w.slots.All() {
			if ln.gen != 0 {
				w.remove(ln)
			}
		}
		w.closeAccepts()
	case cmdSync:
		w.syncs = append(w.syncs, c.done)
	case cmdArm:
		w.armAccepts(c.acc)
	case cmdStopAccept:
		w.stopAccepts(c.acc)
	case cmdCloseSlot:
		w.closeSlot(uint32(c.tok))
	}
}

// lane returns the live lane with token tok, or nil.
func (w *worker) lane(tok uint64) *lane {
	idx, gen := driver.SplitToken(tok)
	if ln := w.slots.Lookup(idx); ln != nil && ln.gen == gen {
		return ln
	}
	return nil
}

// maxHold is how long a lane of mode, whose flush timeout is flush, may
// hold partial data. A lane that polls may have waited up to batchWait
// for its read (a batched wait), so it holds its data for that much less:
// bytes are delivered within the flush timeout of their arrival, as the
// other runners deliver them. Files do not wait to be read.
func (w *worker) maxHold(flush time.Duration, mode readMode) time.Duration {
	if mode == modeFile || mode == modeFileSeq || w.batchWait <= 0 || flush <= w.batchWait {
		return flush
	}
	return flush - w.batchWait
}

func (w *worker) add(c *cmd) {
	idx, gen := driver.SplitToken(c.tok)
	ln := w.slots.Get(idx)
	*ln = lane{
		slot:     idx,
		gen:      gen,
		fd:       int32(c.fd),
		mode:     c.mode,
		readable: c.mode == modeFile, // files need no poll
	}
	w.live++
	if hold := w.maxHold(c.lane.Flush, c.mode); c.mode == modeDgram {
		ln.Driver.ResetDatagram(c.lane, hold)
	} else {
		ln.Driver.Reset(c.lane, hold)
	}
	switch {
	case c.mode == modeFile && ln.Driver.Framed():
		// Read-ahead fills buffers the tail of a record could not be
		// carried into: a framed file is read one buffer at a time.
		ln.mode, ln.fa = modeFileSeq, &fileAhead{next: c.off} // fa.next: the next read's offset
	case c.mode == modeFile:
		ln.fa = &fileAhead{next: c.off}
	}
	switch {
	case c.direct:
		// Accepted into this worker's table: the lane owns the slot.
		ln.fixed, ln.owned = true, true
	case c.mode == modeSock:
		w.direct(ln, c.lane.Src)
	}
	if w.closing {
		w.remove(ln)
		return
	}
	w.host.Enqueue(ln)
}

// remove stops a lane with srcs.ErrStopped.
func (w *worker) remove(ln *lane) { w.stop(ln, false) }

// stop ends a lane, with w.failure when failed and srcs.ErrStopped
// otherwise: at once when nothing is in flight, else after the cancel's
// victims complete.
func (w *worker) stop(ln *lane, failed bool) {
	if ln.removing {
		return
	}
	ln.removing, ln.failed = true, failed
	if ln.op == tagNone {
		w.finish(ln, w.stopErr(ln))
		return
	}
	w.advance(ln)
}

// finish ends a lane: held data is emitted, an empty buffer returned, a
// pending pool wait withdrawn, and Finish reported (driver.Lane.Finish).
// Nothing may be in flight for the lane: the kernel must be done with its
// buffer and descriptor.
func (w *worker) finish(ln *lane, err error) {
	if ln.op != tagNone {
		panic("ring: runner: finishing a lane with an operation in flight")
	}
	w.host.Leave(ln)
	if ln.mode == modeFile {
		// Reads completed in order go out before the end; the kernel is
		// done with the rest.
		w.emitFileReads(ln)
		w.releaseFileReads(ln)
	}
	if rerr := w.release(ln); rerr != nil {
		w.r.log.Error("ring: runner: closing a connection", "lane", ln.lane().ID, "err", rerr)
	}
	l, tok, d := ln.lane(), driver.Token(ln.slot, ln.gen), ln.Driver
	*ln = lane{} // the slot is free; queued pointers go stale
	w.live--
	w.r.front.Finished(w, l, tok)
	d.Finish(err)
}
