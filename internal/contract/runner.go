package contract

import (
	"time"

	"github.com/sluice-io/sluice/pool"
)

// Runner drives lanes: it reads their sources into pool buffers on its own
// workers and hands the filled buffers to each lane's Emitter. The engine,
// the only package that knows several runners exist, never sees how a
// runner schedules its work. All methods are safe for concurrent use.
type Runner interface {
	// Name is "uring", "epoll", "goroutine" or "thread".
	Name() string
	// Add starts driving l, whose source is open. Add does not block on
	// I/O. An error (srcs.ErrNoDescriptor, a thread limit, a closed
	// runner) means the runner will not drive l and will not call Finish.
	Add(l *Lane) error
	// Remove asks the runner to stop driving l: reads in flight are
	// cancelled, bytes already read are emitted (Partial), and
	// Finish(l, srcs.ErrStopped) follows. Remove does not wait. Removing
	// a lane that has finished is a no-op.
	Remove(l *Lane)
	// SetPaused stops (true) or resumes (false) posting new reads on every
	// lane. Reads in flight complete and are emitted. A paused runner still
	// honours Remove and Close.
	SetPaused(paused bool)
	// Close finishes every lane (each gets Finish with srcs.ErrStopped),
	// stops the workers and waits for them. It is idempotent.
	Close() error
	// Stats returns the runner's counters.
	Stats() RunnerStats
}

// RunnerConfig is what the engine passes to a runner's constructor.
type RunnerConfig struct {
	// Workers is the number of event-loop workers (uring, epoll), each an
	// OS-thread-locked goroutine. Other runners ignore it.
	Workers int
	// Pool is the engine's source pool.
	Pool *pool.Pool
	// MaxThreads caps the thread runner's locked OS threads, so that it
	// fails a source clearly instead of crashing the process at Go's
	// thread limit (runtime/debug.SetMaxThreads).
	MaxThreads int
	// Logger receives start-up decisions and per-source trouble. Never nil.
	Logger Logger
	// BatchWait is the latency an event-loop worker may add to gather a
	// batch of completions while several lanes wait for data, or more
	// bytes from a few streams that keep waking it for little; zero
	// wakes for every one. The uring runner honours it (see
	// engine.Config.BatchWait).
	BatchWait time.Duration
	// Wakeups, when set, lets event-loop workers wake processing once per
	// loop turn instead of once per chunk. The engine sets it.
	Wakeups WakeupHolder
	// Inline says processing runs inside Emit, on the goroutine that
	// emits (engine.WithInlineHandler): a worker then never yields its
	// thread for processing to run, since nothing waits for it.
	Inline bool
	// FileSlots is the size of each uring worker's registered file table
	// for sources that hand their descriptor over (HandOff); zero: the
	// soft RLIMIT_NOFILE, at most 65,536; negative: none. Other runners
	// ignore it (see engine.Config.FileSlots).
	FileSlots int
}

// WakeupHolder holds back the wake-ups of processing while a runner's
// worker emits a loop turn's chunks. A worker calls HoldWakeups before the
// turn's first Emit and ReleaseWakeups before it waits again: every Emit
// still queues its chunk at once, but a consumer asleep is woken only at
// the release, once for the whole turn rather than once a chunk, which
// spares a thread wake-up (and across CPUs an interprocessor interrupt)
// per chunk. Holds may nest and overlap between workers. A hold must
// never span a blocking wait. Safe for concurrent use.
type WakeupHolder interface {
	HoldWakeups()
	ReleaseWakeups()
}

// RunnerStats is a snapshot of a runner's own counters.
type RunnerStats struct {
	Runner  string
	Workers int
	// Threads is the number of OS threads the runner holds locked.
	Threads int
	// Lanes is the number of lanes being driven now.
	Lanes int
	// DirectFiles is the number of connections in the workers'
	// registered file tables rather than the process's descriptor table
	// (uring; see RunnerConfig.FileSlots).
	DirectFiles int
	// Accepted counts the connections the runner accepted on its own
	// loops (AcceptRunner; uring and epoll).
	Accepted uint64
	// Reads counts completed read operations (syscalls or io_uring CQEs).
	Reads uint64
	// Waits counts the times a worker blocked in the kernel waiting for
	// work (io_uring_enter with a wait, epoll_wait, poll).
	Waits uint64
	// Wakeups counts cross-thread wake-ups of a worker.
	Wakeups uint64
	// Enters counts the runner's entries into the kernel to submit work or
	// wait for it: io_uring_enter (uring), epoll_wait (epoll), poll
	// (thread). The goroutine runner leaves waiting to Go's netpoller and
	// counts none.
	Enters uint64
	// Completions counts what those entries brought back: CQEs reaped
	// (uring) or readiness events (epoll). Completions per enter is the
	// batching a runner achieves.
	Completions uint64
	// Syscalls counts every system call the runner made on its own behalf:
	// enters, reads and receives, readiness probes, epoll_ctl and wake-up
	// writes. The netpoller's own calls (goroutine runner) are not in it.
	Syscalls uint64
}

// Add returns s with o's figures added to its own (its Runner stays s's):
// the sum of two workers' stats, or of two runners'.
func (s RunnerStats) Add(o RunnerStats) RunnerStats {
	s.Workers += o.Workers
	s.Threads += o.Threads
	s.Lanes += o.Lanes
	s.DirectFiles += o.DirectFiles
	s.Accepted += o.Accepted
	s.Reads += o.Reads
	s.Waits += o.Waits
	s.Wakeups += o.Wakeups
	s.Enters += o.Enters
	s.Completions += o.Completions
	s.Syscalls += o.Syscalls
	return s
}
