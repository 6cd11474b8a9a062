package uring

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring is one io_uring instance: its descriptor, the mapped submission and
// completion rings, and the count of operations in flight.
//
// A Ring is not safe for concurrent use. It belongs to the OS thread that
// created it: call runtime.LockOSThread on a goroutine, then [New], and use
// the ring only from that goroutine until [Ring.Close] returns. The kernel
// ties SINGLE_ISSUER and DEFER_TASKRUN rings to that thread; methods that
// enter the kernel from any other thread fail with [ErrWrongThread]. Other
// goroutines reach the owner through a queue and a [Waker].
type Ring struct {
	fd       int
	tid      int // owner thread, from gettid(2)
	flags    SetupFlags
	features Features

	// Submission ring. The kernel advances sqHead as it consumes entries;
	// this side fills SQEs at sqeTail and publishes them by storing sqTail.
	sqHead    *atomic.Uint32
	sqTail    *atomic.Uint32
	sqFlags   *atomic.Uint32
	sqDropped *atomic.Uint32
	sqMask    uint32
	sqEntries uint32
	sqes      []SQE
	sqeHead   uint32 // first SQE not yet published to the kernel
	sqeTail   uint32 // next SQE to hand out

	// Completion ring. The kernel advances cqTail as it posts CQEs; this
	// side consumes them and advances cqHead.
	cqHead     *atomic.Uint32
	cqTail     *atomic.Uint32
	cqOverflow *atomic.Uint32
	cqMask     uint32
	cqEntries  uint32
	cqes       []CQE

	sqMem, cqMem, sqeMem []byte // mappings; cqMem aliases sqMem with FeatSingleMmap
	bufRings             []*BufRing

	inflight int
	enters   uint64 // io_uring_enter calls, for the runner's counters

	// Timed waits pass these to the kernel, which reads them during the
	// call only. They live in the Ring so a wait allocates nothing.
	waitArg getEventsArg
	waitTS  Timespec
}

// New creates a ring on the calling thread, which must be locked with
// runtime.LockOSThread and must be the only thread that uses the ring.
//
// New asks for cfg.Flags (DefaultFlags if zero). While the kernel answers
// EINVAL it drops, one at a time and in this order, DEFER_TASKRUN (6.1),
// SINGLE_ISSUER (6.0), TASKRUN_FLAG and COOP_TASKRUN (5.19), then
// SUBMIT_ALL (5.18); [Ring.Flags] reports what was granted. When io_uring is
// missing or blocked (ENOSYS, EPERM, EACCES, kernel.io_uring_disabled) the
// error wraps [ErrNotSupported] and says why.
func New(cfg Config) (*Ring, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var p params
	var fd int
	granted, err := setupLadder(cfg.Flags, func(f SetupFlags) error {
		p = params{flags: uint32(f), cqEntries: cfg.CQEntries}
		fd, err = sysSetup(cfg.Entries, &p)
		return err
	})
	if err != nil {
		return nil, setupError(err)
	}
	r := &Ring{fd: fd, tid: unix.Gettid(), flags: granted, features: Features(p.features)}
	if err := r.mapRings(&p); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: mmap: %w", err)
	}
	return r, nil
}

// setupLadder calls try with want, then with one flag fewer each time try
// fails with EINVAL. DEFER_TASKRUN goes before SINGLE_ISSUER, which it
// requires, and TASKRUN_FLAG before COOP_TASKRUN, which it requires.
func setupLadder(want SetupFlags, try func(SetupFlags) error) (SetupFlags, error) {
	order := [...]SetupFlags{SetupDeferTaskrun, SetupSingleIssuer, SetupTaskrunFlag, SetupCoopTaskrun, SetupSubmitAll}
	flags := want
	for {
		err := try(flags)
		if !errors.Is(err, unix.EINVAL) {
			return flags, err
		}
		dropped := false
		for _, f := range order {
			if flags&f != 0 {
				flags &^= f
				dropped = true
				break
			}
		}
		if !dropped {
			return flags, err
		}
	}
}

// setupError explains why io_uring_setup failed.
func setupError(err error) error {
	var reason string
	switch {
	case errors.Is(err, unix.ENOSYS):
		reason = "io_uring_setup(2) is not implemented: kernel older than 5.1, built without CONFIG_IO_URING, or filtered by seccomp"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		switch disabled := ioUringDisabled(); disabled {
		case 2:
			reason = "io_uring is disabled by sysctl kernel.io_uring_disabled=2"
		case 1:
			reason = "io_uring is limited by sysctl kernel.io_uring_disabled=1 to CAP_SYS_ADMIN and kernel.io_uring_group"
		default:
			reason = "io_uring_setup(2) was denied, likely by seccomp or a security module"
		}
	default:
		return fmt.Errorf("ring: setup: %w", err)
	}
	return &NotSupportedError{Op: "setup", Reason: reason, Err: err}
}

// ioUringDisabled reads kernel.io_uring_disabled (6.6), or returns -1.
func ioUringDisabled() int {
	b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled")
	if err != nil {
		return -1
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return v
}

// mapRings maps the rings the way liburing io_uring_mmap does (src/setup.c):
// one mapping for both rings with FeatSingleMmap (5.4), else two, plus the
// SQE array.
func (r *Ring) mapRings(p *params) error {
	const prot = unix.PROT_READ | unix.PROT_WRITE
	const flags = unix.MAP_SHARED | unix.MAP_POPULATE
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(CQE{}))
	single := r.features&FeatSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	sqMem, err := unix.Mmap(r.fd, offSQRing, sqSize, prot, flags)
	if err != nil {
		return err
	}
	cqMem := sqMem
	if !single {
		if cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags); err != nil {
			unix.Munmap(sqMem)
			return err
		}
	}
	sqeMem, err := unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(SQE{})), prot, flags)
	if err != nil {
		unix.Munmap(sqMem)
		if !single {
			unix.Munmap(cqMem)
		}
		return err
	}
	r.sqMem, r.cqMem, r.sqeMem = sqMem, cqMem, sqeMem

	r.sqHead = u32At(sqMem, p.sqOff.head)
	r.sqTail = u32At(sqMem, p.sqOff.tail)
	r.sqFlags = u32At(sqMem, p.sqOff.flags)
	r.sqDropped = u32At(sqMem, p.sqOff.dropped)
	r.sqMask = u32At(sqMem, p.sqOff.ringMask).Load()
	r.sqEntries = u32At(sqMem, p.sqOff.ringEntries).Load()
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(&sqeMem[0])), r.sqEntries)
	// Map SQ slot i to SQE i once, so submitting never touches the array
	// again (liburing io_uring_setup_ring_pointers does the same).
	array := unsafe.Slice((*uint32)(unsafe.Pointer(&sqMem[p.sqOff.array])), r.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqeHead = r.sqTail.Load()
	r.sqeTail = r.sqeHead

	r.cqHead = u32At(cqMem, p.cqOff.head)
	r.cqTail = u32At(cqMem, p.cqOff.tail)
	r.cqOverflow = u32At(cqMem, p.cqOff.overflow)
	r.cqMask = u32At(cqMem, p.cqOff.ringMask).Load()
	r.cqEntries = u32At(cqMem, p.cqOff.ringEntries).Load()
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&cqMem[p.cqOff.cqes])), r.cqEntries)
	return nil
}

// u32At views a 32-bit ring field as an atomic. sync/atomic operations are
// sequentially consistent, which covers the acquire and release ordering
// liburing uses on heads and tails.
func u32At(mem []byte, off uint32) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

// Fd returns the ring's descriptor, for diagnostics and for other rings to
// address this one.
func (r *Ring) Fd() int { return r.fd }

// Flags returns the setup flags the kernel granted.
func (r *Ring) Flags() SetupFlags { return r.flags }

// Features returns the features the kernel reported at setup.
func (r *Ring) Features() Features { return r.features }

// SQEntries returns the submission queue size.
func (r *Ring) SQEntries() uint32 { return r.sqEntries }

// CQEntries returns the completion queue size.
func (r *Ring) CQEntries() uint32 { return r.cqEntries }

// InFlight returns the number of submitted operations whose final CQE (one
// without CQEFMore) has not been consumed yet. SQEs with SQECQESkipSuccess
// make it overcount, because they may post nothing.
func (r *Ring) InFlight() int { return r.inflight }

// Enters returns how many times the ring has called io_uring_enter. Like
// every other method it belongs to the ring's owner.
func (r *Ring) Enters() uint64 { return r.enters }

// Overflow returns how many CQEs the kernel had to drop because the CQ was
// full and it could not hold them (IORING_FEAT_NODROP kernels drop only when
// out of memory).
func (r *Ring) Overflow() uint32 {
	if r.fd < 0 {
		return 0
	}
	return r.cqOverflow.Load()
}

// GetSQE returns the next free submission queue entry, or nil when the queue
// is full (submit, then try again; [Ring.NextSQE] does both). Its contents
// are stale: start with a Prep method. It mirrors liburing _io_uring_get_sqe.
func (r *Ring) GetSQE() *SQE {
	if r.fd < 0 {
		return nil
	}
	// Load-acquire of the kernel's head: slots it has consumed are free.
	if r.sqeTail-r.sqHead.Load() >= r.sqEntries {
		return nil
	}
	s := &r.sqes[r.sqeTail&r.sqMask]
	r.sqeTail++
	return s
}

// NextSQE is GetSQE that submits the queue to make room when it is full.
func (r *Ring) NextSQE() (*SQE, error) {
	if s := r.GetSQE(); s != nil {
		return s, nil
	}
	if r.fd < 0 {
		return nil, ErrClosed
	}
	if _, err := r.Submit(); err != nil {
		return nil, err
	}
	if s := r.GetSQE(); s != nil {
		return s, nil
	}
	return nil, ErrSQFull
}

// flushSQ publishes the SQEs handed out since the last flush and returns how
// many the kernel has yet to consume. It mirrors liburing __io_uring_flush_sq,
// src/queue.c.
func (r *Ring) flushSQ() uint32 {
	tail := r.sqeTail
	if r.sqeHead != tail {
		r.sqeHead = tail
		// Store-release: the kernel must see the SQE contents before the
		// tail that covers them.
		r.sqTail.Store(tail)
	}
	return tail - r.sqHead.Load()
}

// cqNeedsFlush reports whether completions wait outside the CQ ring: in the
// kernel's overflow list, or as deferred task work. Either needs an enter
// with GETEVENTS (liburing cq_ring_needs_flush, src/queue.c).
func (r *Ring) cqNeedsFlush() bool {
	return r.sqFlags.Load()&(sqCQOverflow|sqTaskrun) != 0
}

// enter wraps io_uring_enter, counts what it submitted as in flight, and
// turns a single-issuer refusal into ErrWrongThread. Errors are bare errnos
// so hot callers can test them without allocating.
func (r *Ring) enter(toSubmit, minComplete, flags uint32, arg unsafe.Pointer, argSize uintptr) (int, error) {
	// A SINGLE_ISSUER ring is checked by the kernel (EEXIST); only rings
	// without it pay for a gettid here.
	if r.flags&SetupSingleIssuer == 0 && unix.Gettid() != r.tid {
		return 0, ErrWrongThread
	}
	r.enters++
	n, err := sysEnter(r.fd, toSubmit, minComplete, flags, arg, argSize)
	if toSubmit > 0 {
		r.inflight += n
	}
	if err == unix.EEXIST && unix.Gettid() != r.tid {
		return n, ErrWrongThread
	}
	return n, err
}

func wrapEnter(err error) error {
	if err == nil || err == ErrWrongThread {
		return err
	}
	return fmt.Errorf("ring: enter: %w", err)
}

// Submit hands queued SQEs to the kernel without waiting and returns how many
// it took. It makes no system call when there is nothing to submit and no
// completion is held back in the kernel.
func (r *Ring) Submit() (int, error) {
	if r.fd < 0 {
		return 0, ErrClosed
	}
	toSubmit := r.flushSQ()
	var flags uint32
	if r.cqNeedsFlush() {
		flags |= enterGetEvents
	}
	if toSubmit == 0 && flags == 0 {
		return 0, nil
	}
	n, err := r.enter(toSubmit, 0, flags, nil, nsigBytes)
	return n, wrapEnter(err)
}

// SubmitNowait submits queued SQEs and runs deferred completion work
// (DEFER_TASKRUN) and the overflow flush, without ever sleeping, and
// returns how many SQEs it submitted. Operations that complete at
// submission (a page-cache read, a receive from a socket with data
// queued) have their CQEs ready when it returns. Unlike the waiting
// calls, it keeps the calling goroutine's P while in the kernel (see
// sysEnterNowait): use it for the submissions of a loop that reaps at
// once, and a waiting call to sleep.
func (r *Ring) SubmitNowait() (int, error) {
	if r.fd < 0 {
		return 0, ErrClosed
	}
	return r.enterNowait(r.flushSQ())
}

// enterNowait makes the never-sleeping enter of SubmitNowait, submitting
// toSubmit SQEs (zero only collects completions).
func (r *Ring) enterNowait(toSubmit uint32) (int, error) {
	if r.flags&SetupSingleIssuer == 0 && unix.Gettid() != r.tid {
		return 0, ErrWrongThread
	}
	r.enters++
	n, err := sysEnterNowait(r.fd, toSubmit)
	r.inflight += n
	if err == unix.EEXIST && unix.Gettid() != r.tid {
		return n, ErrWrongThread
	}
	return n, wrapEnter(err)
}

// SubmitAndWait submits queued SQEs and blocks until at least n CQEs are
// ready (n is capped at the CQ size), returning how many SQEs it submitted.
// It always passes GETEVENTS, so with n == 0 it still runs deferred
// completion work (DEFER_TASKRUN) and flushes overflowed CQEs. The wait
// blocks the thread in the kernel and is retried across EINTR.
func (r *Ring) SubmitAndWait(n uint32) (int, error) {
	if r.fd < 0 {
		return 0, ErrClosed
	}
	n = min(n, r.cqEntries)
	submitted := 0
	for {
		got, err := r.enter(r.flushSQ(), n, enterGetEvents, nil, nsigBytes)
		submitted += got
		if err != nil {
			return submitted, wrapEnter(err)
		}
		// A signal can end the wait early once something was submitted.
		if r.CQReady() >= n {
			return submitted, nil
		}
	}
}

// SubmitAndWaitTimeout is SubmitAndWait that gives up after d. A timeout is
// not an error: check [Ring.CQReady] or [Ring.PeekCQE]. It needs
// IORING_FEAT_EXT_ARG (5.11).
func (r *Ring) SubmitAndWaitTimeout(n uint32, d time.Duration) (int, error) {
	if r.fd < 0 {
		return 0, ErrClosed
	}
	if r.features&FeatExtArg == 0 {
		return 0, &NotSupportedError{Op: "wait", Reason: "timed waits need IORING_FEAT_EXT_ARG (5.11)"}
	}
	n = min(n, r.cqEntries)
	deadline := time.Now().Add(d)
	submitted := 0
	for {
		left := max(time.Until(deadline), 0)
		r.waitTS = Timespec{Sec: int64(left / time.Second), Nsec: int64(left % time.Second)}
		r.waitArg = getEventsArg{sigmaskSz: nsigBytes, ts: uint64(uintptr(unsafe.Pointer(&r.waitTS)))}
		got, err := r.enter(r.flushSQ(), n, enterGetEvents|enterExtArg,
			unsafe.Pointer(&r.waitArg), unsafe.Sizeof(r.waitArg))
		submitted += got
		switch {
		case err == unix.ETIME:
			return submitted, nil
		case err == unix.EINTR:
		case err != nil:
			return submitted, wrapEnter(err)
		case r.CQReady() >= n:
			return submitted, nil
		}
		if left == 0 {
			return submitted, nil
		}
	}
}

// SubmitAndWaitBatch submits queued SQEs and waits for a batch: up to
// minWait for n CQEs; if at least one is ready by then it returns, and if
// none is, it returns as soon as the first one arrives, or after timeout
// (no limit when timeout is negative). With DEFER_TASKRUN the kernel does
// not even wake the thread for completions before n of them or minWait,
// so under load one wake-up reaps many completions, while an idle ring
// still wakes at once for its first. A timeout is not an error. It needs
// IORING_FEAT_MIN_TIMEOUT (6.12): check [Ring.Features].
func (r *Ring) SubmitAndWaitBatch(n uint32, minWait, timeout time.Duration) (int, error) {
	if r.fd < 0 {
		return 0, ErrClosed
	}
	if r.features&FeatMinTimeout == 0 {
		return 0, &NotSupportedError{Op: "wait", Reason: "batched waits need IORING_FEAT_MIN_TIMEOUT (6.12)"}
	}
	n = min(n, r.cqEntries)
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	submitted := 0
	for {
		// Without a timeout the kernel takes minWait for the whole wait:
		// "no limit" is an hour, and the loop goes on after it.
		left := time.Duration(-1)
		wait, batch := time.Hour, minWait
		if timeout >= 0 {
			// The kernel waits out minWait before it looks at the
			// timeout: a batch must end by the deadline.
			left = max(time.Until(deadline), 0)
			wait, batch = left, min(minWait, left)
		}
		usec := uint32(min(max(batch/time.Microsecond, 1), math.MaxUint32))
		r.waitTS = Timespec{Sec: int64(wait / time.Second), Nsec: int64(wait % time.Second)}
		r.waitArg = getEventsArg{sigmaskSz: nsigBytes, minWaitUsec: usec, ts: uint64(uintptr(unsafe.Pointer(&r.waitTS)))}
		got, err := r.enter(r.flushSQ(), n, enterGetEvents|enterExtArg,
			unsafe.Pointer(&r.waitArg), unsafe.Sizeof(r.waitArg))
		submitted += got
		switch {
		case err == unix.ETIME && timeout >= 0:
			return submitted, nil
		case err == unix.ETIME, err == unix.EINTR:
		case err != nil:
			return submitted, wrapEnter(err)
		case r.CQReady() > 0:
			return submitted, nil
		}
		if left == 0 {
			return submitted, nil
		}
	}
}

// CQReady returns how many CQEs wait in the completion ring.
func (r *Ring) CQReady() uint32 {
	if r.fd < 0 {
		return 0
	}
	return r.cqTail.Load() - r.cqHead.Load()
}

// PeekCQE returns the oldest unconsumed CQE without waiting, or false. The
// CQE stays valid until [Ring.CQAdvance]. When the ring is empty but the
// kernel holds completions back (CQ overflow, deferred task work), PeekCQE
// enters the kernel once to collect them. It mirrors liburing
// __io_uring_peek_cqe and the flush check of _io_uring_get_cqe, src/queue.c.
func (r *Ring) PeekCQE() (*CQE, bool) {
	if r.fd < 0 {
		return nil, false
	}
	head := r.cqHead.Load()
	// Load-acquire of the tail: CQEs below it are fully written.
	if head != r.cqTail.Load() {
		return &r.cqes[head&r.cqMask], true
	}
	if r.flushCQ() && head != r.cqTail.Load() {
		return &r.cqes[head&r.cqMask], true
	}
	return nil, false
}

// flushCQ enters the kernel to collect held-back completions, if any.
func (r *Ring) flushCQ() bool {
	if !r.cqNeedsFlush() {
		return false
	}
	// Collect only: SQEs queued meanwhile go in with the caller's next
	// submission, as they would have without the flush.
	_, err := r.enterNowait(0)
	return err == nil
}

// CQAdvance marks the oldest n CQEs consumed, handing their slots back to the
// kernel, and settles the in-flight count: every CQE without CQEFMore ends an
// operation. It mirrors liburing io_uring_cq_advance.
func (r *Ring) CQAdvance(n uint32) {
	if r.fd < 0 || n == 0 {
		return
	}
	head := r.cqHead.Load()
	for i := head; i != head+n; i++ {
		if r.cqes[i&r.cqMask].Flags&CQEFMore == 0 {
			r.inflight--
		}
	}
	// Store-release: the kernel may reuse the slots once it sees the head.
	r.cqHead.Store(head + n)
}

// ForEachCQE calls fn for every ready CQE, oldest first, then consumes them,
// collecting held-back completions as PeekCQE does. It returns how many it
// consumed. fn must not keep the *CQE, and must not call PeekCQE, CQAdvance
// or ForEachCQE; it may queue and submit SQEs.
func (r *Ring) ForEachCQE(fn func(*CQE)) int {
	total := 0
	for r.fd >= 0 {
		head, tail := r.cqHead.Load(), r.cqTail.Load()
		if head == tail {
			if !r.flushCQ() {
				break
			}
			if tail = r.cqTail.Load(); head == tail {
				break
			}
		}
		for i := head; i != tail; i++ {
			fn(&r.cqes[i&r.cqMask])
		}
		r.CQAdvance(tail - head)
		total += int(tail - head)
	}
	return total
}

// Close cancels every operation in flight (ASYNC_CANCEL with ANY|ALL, 5.19),
// reaps completions until none is left, then unmaps the rings and provided
// buffer rings and closes the descriptor. Completions it reaps are
// discarded, so drain the ones you need first. Once Close returns, the kernel
// no longer touches memory the ring's operations referred to, unless an
// operation refused to finish (then Close reports it).
//
// Close must run on the owner thread; elsewhere it returns ErrWrongThread and
// leaves the ring open. Later calls return nil.
func (r *Ring) Close() error {
	if r.fd < 0 {
		return nil
	}
	if unix.Gettid() != r.tid {
		return ErrWrongThread
	}
	err := r.drain()
	for _, b := range r.bufRings {
		b.unmap()
	}
	r.bufRings = nil
	unix.Munmap(r.sqeMem)
	if &r.cqMem[0] != &r.sqMem[0] {
		unix.Munmap(r.cqMem)
	}
	unix.Munmap(r.sqMem)
	if cerr := unix.Close(r.fd); cerr != nil && err == nil {
		err = fmt.Errorf("ring: close: %w", cerr)
	}
	r.fd = -1
	r.sqes, r.cqes, r.sqMem, r.cqMem, r.sqeMem = nil, nil, nil, nil, nil
	return err
}

// closeUserData tags the cancel-everything SQE that Close submits.
const closeUserData = ^uint64(0)

// drainQuiet is how long Close waits without any completion before it gives
// up on operations that will not finish.
const drainQuiet = 5 * time.Second

func (r *Ring) drain() error {
	// Submit what is queued, so every SQE is either done or cancellable.
	if _, err := r.Submit(); err != nil {
		return err
	}
	if r.inflight == 0 {
		return nil
	}
	if s := r.GetSQE(); s != nil {
		s.PrepCancel(0, CancelAny|CancelAll)
		s.UserData = closeUserData
	}
	quietSince := time.Now()
	for r.inflight > 0 {
		if _, err := r.SubmitAndWaitTimeout(1, 100*time.Millisecond); err != nil {
			return err
		}
		if n := r.CQReady(); n > 0 {
			r.CQAdvance(n)
			quietSince = time.Now()
			continue
		}
		if r.flushCQ() {
			continue
		}
		if time.Since(quietSince) > drainQuiet {
			return fmt.Errorf("ring: close: %d operations still in flight after cancelling", r.inflight)
		}
	}
	r.CQAdvance(r.CQReady())
	return nil
}
