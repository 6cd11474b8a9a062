//go:build !linux

package harness

import (
	"errors"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"time"

	"golang.org/x/sys/unix"
)

// ProcUsage approximates the thread count by the threads the runtime has
// created, and the resident set by the peak (there is no /proc here).
func ProcUsage() (threads int, rss int64) {
	return pprof.Lookup("threadcreate").Count(), peakRSS()
}

// peakRSS is getrusage's ru_maxrss, in bytes on the BSDs and macOS.
func peakRSS() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss
}

// resetPeakRSS cannot reset the peak outside Linux.
func resetPeakRSS() {}

// AllowedCPUs lists every CPU: affinity is not available here.
func AllowedCPUs() []int {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

func PinProcess([]int) error { return errors.New("bench: pinning CPUs needs Linux") }

// StartOnCPUs starts cmd unpinned: affinity is not available here.
func StartOnCPUs(cmd *exec.Cmd, _ []int) error { return cmd.Start() }

// SetTimerSlack does nothing here.
func SetTimerSlack(int) {}

// ProcCPU cannot read another process's CPU time here.
func ProcCPU(int) (time.Duration, bool) { return 0, false }

// threadCPU is 0: no per-thread CPU time here.
func threadCPU() time.Duration { return 0 }

// PollFds waits until one of fds is ready, or for at most d, rounded up
// to a millisecond (poll).
func PollFds(fds []unix.PollFd, d time.Duration) {
	unix.Poll(fds, int((d+time.Millisecond-1)/time.Millisecond))
}

// RunqueueWait is not available here.
func RunqueueWait() time.Duration { return 0 }

// rxBacklog is not available here (there is no /proc/net/tcp).
func rxBacklog(int) (queued int64, sockets int) { return 0, 0 }

// rxBacklogOf is not available here.
func rxBacklogOf(int, int) (queued int64, sockets int) { return 0, 0 }
