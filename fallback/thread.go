package fallback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/srcs"
)

// DefaultMaxThreads is the thread runner's cap on lane threads when
// RunnerConfig.MaxThreads is zero. It leaves room under Go's default limit
// of 10,000 OS threads (runtime/debug.SetMaxThreads), past which the runtime
// aborts the whole process, for the threads the rest of the program needs.
const DefaultMaxThreads = 8000

// ErrThreadLimit is wrapped by Thread.Add when every allowed lane thread is
// in use.
var ErrThreadLimit = errors.New("fallback: thread: lane thread limit reached")

// Thread is the thread-per-source runner, NebulaStream's blocking baseline
// (G7): each lane gets a goroutine locked to its own OS thread for its whole
// life, which waits in poll(2) and reads with read(2), or pread(2) for
// files. It drives only sources that are contract.Descriptor. Datagram
// descriptors (SOCK_DGRAM sockets) are read one datagram per poll and
// recvmsg(2), into buffers framed as srcs.ForEachDatagram reads them; a
// datagram too large for the room left is dropped, reported to the emitter
// if it is a contract.DatagramDropReporter, and logged once per lane, and the
// lane keeps running.
//
// The lane's descriptor may be non-blocking. Each lane polls it together
// with a private wake descriptor (an eventfd on Linux, a pipe elsewhere), so
// Remove, Close and the end of a pause reach a lane at once, and with a
// timeout at the flush deadline of the data it holds. A lane waits for
// readability before it takes a buffer, so idle lanes hold none. Regular
// files are always readable and are read without polling.
//
// Every lane costs an OS thread, and Go aborts the process when it has more
// than runtime/debug.SetMaxThreads threads (10,000 by default). The runner
// therefore refuses lanes beyond RunnerConfig.MaxThreads (DefaultMaxThreads
// when zero) with ErrThreadLimit instead. A lane's thread counts against the
// cap from Add until just before its Finish; the thread itself exits a
// moment later.
//
// A Thread is safe for concurrent use. It uses each lane's descriptor from
// Add until it calls Finish and never closes it.
type Thread struct {
	log        contract.Logger
	maxThreads int

	laneSet[*threadLane] // mu, closed, lanes, wg
	paused               bool
	threads              int                  // lane threads reserved or running
	retired              contract.RunnerStats // counters of lanes that have finished

	pausedFlag atomic.Bool // mirrors paused, for the read path
}

// NewThread returns a thread-per-lane runner capped at cfg.MaxThreads lane
// threads (DefaultMaxThreads when zero).
func NewThread(cfg contract.RunnerConfig) (*Thread, error) {
	if cfg.MaxThreads < 0 {
		return nil, fmt.Errorf("fallback: thread: config: MaxThreads = %d: must not be negative", cfg.MaxThreads)
	}
	limit := cfg.MaxThreads
	if limit == 0 {
		limit = DefaultMaxThreads
	}
	log := cfg.Logger
	if log == nil {
		log = contract.Discard{}
	}
	log.Debug("fallback: thread runner", "max_threads", limit)
	return &Thread{log: log, maxThreads: limit, laneSet: laneSet[*threadLane]{lanes: map[*contract.Lane]*threadLane{}}}, nil
}

// Name returns "thread".
func (t *Thread) Name() string { return "thread" }

// threadLane is the state of one lane. Everything but stop, the counters
// and the fields under mu is owned by the lane's thread.
type threadLane struct {
	f      driver.Lane
	fd     int
	kind   contract.Kind
	off    int64 // next pread offset, for files
	fds    [2]unix.PollFd
	ctx    context.Context // ends on Remove or Close, to abandon a pool wait
	cancel context.CancelFunc
	stop   atomic.Bool
	reads  atomic.Uint64
	waits  atomic.Uint64
	wakes  atomic.Uint64

	mu   sync.Mutex
	done bool        // the wake descriptor is closed; guarded by mu
	wake threadWaker // written under mu, read by the lane's thread
}

// Add reserves a thread for l, takes its descriptor and starts the thread.
// It fails with ErrThreadLimit at the cap, with srcs.ErrNoDescriptor for a
// source that is no contract.Descriptor, for a datagram descriptor that is no
// SOCK_DGRAM socket, and after Close.
func (t *Thread) Add(l *contract.Lane) error {
	// The thread is reserved before the source is touched: Desc may
	// detach a connection from the netpoller, which cannot be undone.
	reserved := false
	a, err := driver.AdmitDescriptor("fallback: thread", l, func(l *contract.Lane) error {
		err := t.reserve(l)
		reserved = err == nil
		return err
	})
	var tl *threadLane
	if err == nil {
		tl, err = newThreadLane(l, a)
	}
	if err != nil {
		if reserved {
			t.mu.Lock()
			t.threads--
			t.mu.Unlock()
		}
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.lanes[l] != nil {
		// Close or a concurrent Add of the same lane won meanwhile.
		t.threads--
		tl.closeWake()
		tl.cancel()
		if t.closed {
			return fmt.Errorf("fallback: thread: add lane %d: %w", l.ID, net.ErrClosed)
		}
		return fmt.Errorf("fallback: thread: add lane %d: already added", l.ID)
	}
	t.lanes[l] = tl
	t.wg.Go(func() { t.run(tl) })
	return nil
}

// reserve counts a lane thread against the cap.
func (t *Thread) reserve(l *contract.Lane) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return fmt.Errorf("fallback: thread: add lane %d: %w", l.ID, net.ErrClosed)
	case t.lanes[l] != nil:
		return fmt.Errorf("fallback: thread: add lane %d: already added", l.ID)
	case t.threads >= t.maxThreads:
		return fmt.Errorf("%w: lane %d (%s) would be thread %d of at most %d; raise RunnerConfig.MaxThreads "+
			"(and, past about 10000 threads in the process, runtime/debug.SetMaxThreads) or use the epoll or uring runner",
			ErrThreadLimit, l.ID, l.Name(), t.threads+1, t.maxThreads)
	}
	t.threads++
	return nil
}

func newThreadLane(l *contract.Lane, desc driver.Admitted) (*threadLane, error) {
	wake, err := newThreadWaker()
	if err != nil {
		return nil, fmt.Errorf("fallback: thread: add lane %d (%s): wake descriptor: %w", l.ID, l.Name(), err)
	}
	tl := &threadLane{fd: desc.FD, kind: desc.Kind, off: desc.Offset, wake: wake}
	if desc.How == driver.ReadFile {
		tl.kind = contract.File // a stream behind which a file stands reads like one
	}
	if desc.Kind == contract.Datagram {
		tl.f.ResetDatagram(l, l.Flush)
	} else {
		tl.f.Reset(l, l.Flush)
	}
	tl.fds[0] = unix.PollFd{Fd: int32(desc.FD), Events: unix.POLLIN}
	tl.fds[1] = unix.PollFd{Fd: int32(wake.r), Events: unix.POLLIN}
	tl.ctx, tl.cancel = context.WithCancel(context.Background())
	return tl, nil
}

// Remove stops driving l: its thread wakes, emits partial data and finishes
// with srcs.ErrStopped. It does not wait, and is a no-op for a lane that has
// finished or was never added.
func (t *Thread) Remove(l *contract.Lane) { t.remove(l) }

// SetPaused stops or resumes new reads on every lane. Paused lanes still
// flush partial data on time, give back empty buffers, and honour Remove
// and Close.
func (t *Thread) SetPaused(paused bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.paused == paused {
		return
	}
	t.paused = paused
	t.pausedFlag.Store(paused)
	if !paused {
		// Paused lanes poll only their wake descriptor; a lane caught
		// between reads sees the flag, so pausing needs no wake-up.
		for _, tl := range t.lanes {
			tl.signal()
		}
	}
}

// Close stops every lane, each finishing with srcs.ErrStopped, and waits
// for their goroutines to exit. It is idempotent.
func (t *Thread) Close() error { return t.closeAll() }

// Stats returns the runner's counters. Threads and Workers count the lane
// threads; Waits counts polls and Wakeups writes to wake descriptors.
func (t *Thread) Stats() contract.RunnerStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.retired
	st.Runner, st.Workers, st.Threads, st.Lanes = t.Name(), t.threads, t.threads, len(t.lanes)
	for _, tl := range t.lanes {
		st.Reads += tl.reads.Load()
		st.Waits += tl.waits.Load()
		st.Wakeups += tl.wakes.Load()
	}
	st.Enters = st.Waits
	st.Syscalls = st.Reads + st.Waits + st.Wakeups
	return st
}

// halt asks the lane's thread to stop and wakes it.
func (tl *threadLane) halt() {
	tl.stop.Store(true)
	tl.cancel()
	tl.signal()
}

// signal wakes the lane's thread out of poll, unless it has exited.
func (tl *threadLane) signal() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.done {
		return
	}
	tl.wakes.Add(1)
	// A full pipe already holds a wake-up; nothing else can fail here.
	_ = tl.wake.wake()
}

// closeWake closes the wake descriptor once nobody can write to it.
func (tl *threadLane) closeWake() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if !tl.done {
		tl.done = true
		tl.wake.close()
	}
}

// run is the lane's thread: it drives the lane to its end and reports it.
func (t *Thread) run(tl *threadLane) {
	// Never unlocked: the thread exits with the goroutine, so no other
	// goroutine ever inherits a thread that spent its life in blocking
	// calls, and the thread count stays honest.
	runtime.LockOSThread()
	err := t.drive(tl)
	tl.closeWake()
	tl.cancel()
	t.mu.Lock()
	delete(t.lanes, tl.f.Lane())
	t.threads--
	t.retired.Reads += tl.reads.Load()
	t.retired.Waits += tl.waits.Load()
	t.retired.Wakeups += tl.wakes.Load()
	t.mu.Unlock()
	tl.f.Finish(err)
}

// drive reads the lane until it ends and returns the error to finish with.
func (t *Thread) drive(tl *threadLane) error {
	f := &tl.f
	for {
		if tl.stop.Load() {
			return srcs.ErrStopped
		}
		if f.Cutting() {
			// Whole records wait for the buffer their tail moves into.
			if err := tl.acquire(); err != nil {
				return err
			}
			continue
		}
		paused := t.pausedFlag.Load()
		if paused {
			f.Idle() // an idle lane pins no buffer
		}
		timeout := -1
		if due, ok := f.Due(); ok {
			d := time.Until(due)
			if d <= 0 {
				f.Flush(time.Now())
				continue
			}
			// Round up, since waking early would only poll again, and
			// cap it, since poll(2) takes a C int of milliseconds.
			timeout = int((min(d, time.Hour) + time.Millisecond - 1) / time.Millisecond)
		}
		if paused || tl.kind != contract.File {
			readable, err := tl.poll(paused, timeout)
			if err != nil {
				return err
			}
			if !readable {
				continue
			}
		}
		if !f.Held() {
			if err := tl.acquire(); err != nil {
				return err
			}
		}
		// A pause or a stop that came while poll(2) or the acquire
		// waited: no read after it.
		if t.pausedFlag.Load() || tl.stop.Load() {
			continue
		}
		if err := t.readOnce(tl); err != nil {
			return err
		}
	}
}

// readOnce reads the lane once and commits what came; it returns the
// error to finish the lane with, or nil to go on.
func (t *Thread) readOnce(tl *threadLane) error {
	f := &tl.f
	var n int
	var err error
	truncated := false
	if tl.kind == contract.Datagram {
		n, truncated, err = recvDatagram(tl.fd, f.Space())
	} else {
		n, err = tl.read(f.Space())
	}
	tl.reads.Add(1)
	errno := driver.Errno(err)
	switch r := driver.Result(n, errno, tl.kind == contract.Datagram); {
	case r == driver.ReadAgain:
		return nil
	case r == driver.ReadDrained:
		if tl.kind == contract.Datagram {
			// A datagram that failed its checksum made poll report
			// readable; an idle lane holds no buffer.
			f.Idle()
		}
		return nil
	case (r == driver.ReadFailed || r == driver.ReadEnd) && tl.stop.Load():
		return srcs.ErrStopped
	case r == driver.ReadFailed:
		return driver.ReadError(tl.readOp(), errno)
	case r == driver.ReadEnd:
		return io.EOF
	case truncated:
		f.Drop(n, t.log, "fallback: thread")
		return nil
	}
	now := time.Now()
	if _, err := f.Commit(n, now); err != nil {
		return err
	}
	f.FlushIfDue(now)
	return nil
}

// acquire waits for a buffer from the lane's account and gives it to the
// fill.
func (tl *threadLane) acquire() error {
	b, err := tl.f.Lane().Account.Acquire(tl.ctx)
	if err != nil {
		if tl.stop.Load() {
			return srcs.ErrStopped
		}
		return fmt.Errorf("fallback: thread: lane %d: acquire: %w", tl.f.Lane().ID, err)
	}
	tl.f.Hold(b, time.Now())
	return nil
}

// poll waits until the lane's descriptor is readable (unless paused), its
// wake descriptor fires, or timeout milliseconds pass (never when -1). It
// reports whether the lane's descriptor is ready to read.
func (tl *threadLane) poll(paused bool, timeout int) (bool, error) {
	tl.fds[0].Fd = int32(tl.fd)
	if paused {
		tl.fds[0].Fd = -1 // poll(2) ignores negative descriptors
	}
	tl.fds[0].Revents, tl.fds[1].Revents = 0, 0
	tl.waits.Add(1)
	_, err := unix.Poll(tl.fds[:], timeout)
	switch {
	case err == unix.EINTR:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("fallback: thread: lane %d: %w", tl.f.Lane().ID, os.NewSyscallError("poll", err))
	}
	if tl.fds[1].Revents != 0 {
		// The caller re-checks stop and pause before anything else.
		tl.wake.drain()
		return false, nil
	}
	if tl.fds[0].Revents&unix.POLLNVAL != 0 {
		return false, fmt.Errorf("fallback: thread: lane %d: descriptor %d: %w", tl.f.Lane().ID, tl.fd, os.ErrClosed)
	}
	// POLLHUP and POLLERR count as readable: the read reports them.
	return tl.fds[0].Revents != 0, nil
}

func (tl *threadLane) readOp() string {
	if tl.kind == contract.Datagram {
		return "recvmsg"
	}
	return "read"
}

// read reads once from the lane's descriptor, positionally for files.
func (tl *threadLane) read(p []byte) (int, error) {
	if tl.kind == contract.File {
		n, err := unix.Pread(tl.fd, p, tl.off)
		if n > 0 {
			tl.off += int64(n)
		}
		return n, err
	}
	return unix.Read(tl.fd, p)
}
