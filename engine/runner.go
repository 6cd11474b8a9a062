package engine

import (
	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/ring"
)

// The runners the engine chooses from.
var (
	_ contract.Runner = (*fallback.Goroutine)(nil)
	_ contract.Runner = (*fallback.Thread)(nil)
	_ contract.Runner = (*fallback.Epoll)(nil)
	_ contract.Runner = (*ring.Runner)(nil)
)

// RunnerStats is a snapshot of a runner's own counters (Stats.Runners).
type RunnerStats struct {
	Runner  string
	Workers int
	// Threads is the number of OS threads the runner holds locked.
	Threads int
	// Lanes is the number of sources the runner reads now.
	Lanes int
	// DirectFiles is the number of connections in the workers'
	// registered file tables rather than the process's descriptor table
	// (uring; see Config.FileSlots).
	DirectFiles int
	// Accepted counts the connections the runner accepted on its own
	// loops (uring and epoll; see Engine.AddListener).
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
	// The runners count in contract.RunnerStats; the conversions keep
	// the two field lists equal, or the engine does not build.
	return RunnerStats(contract.RunnerStats(s).Add(contract.RunnerStats(o)))
}
