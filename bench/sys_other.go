//go:build !linux

package bench

import (
	"errors"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"time"

	"golang.org/x/sys/unix"
)

// procUsage approximates the thread count by the threads the runtime has
// created, and the resident set by the peak (there is no /proc here).
func procUsage() (threads int, rss int64) {
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

// allowedCPUs lists every CPU: affinity is not available here.
func allowedCPUs() []int {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

func pinProcess([]int) error { return errors.New("bench: pinning CPUs needs Linux") }

// startOnCPUs starts cmd unpinned: affinity is not available here.
func startOnCPUs(cmd *exec.Cmd, _ []int) error { return cmd.Start() }

// setTimerSlack does nothing here.
func setTimerSlack(int) {}

// procCPU cannot read another process's CPU time here.
func procCPU(int) (time.Duration, bool) { return 0, false }

// threadCPU is 0: no per-thread CPU time here.
func threadCPU() time.Duration { return 0 }

// pollFds waits until one of fds is ready, or for at most d, rounded up
// to a millisecond (poll).
func pollFds(fds []unix.PollFd, d time.Duration) {
	unix.Poll(fds, int((d+time.Millisecond-1)/time.Millisecond))
}

// runqueueWait is not available here.
func runqueueWait() time.Duration { return 0 }

// rxBacklog is not available here (there is no /proc/net/tcp).
func rxBacklog(int) (queued int64, sockets int) { return 0, 0 }

// rxBacklogOf is not available here.
func rxBacklogOf(int, int) (queued int64, sockets int) { return 0, 0 }
