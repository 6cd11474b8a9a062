package harness

import (
	"fmt"
	"time"
)

// CPUShare is the CPU time that processes other than the measurement's
// own used while it ran.
type CPUShare struct {
	Seconds float64 // the interval's length
	Others  float64 // CPU-seconds of every other process
}

// CPUMark is a reading of every process's CPU time, for CPUShareSince.
type CPUMark struct {
	at    time.Time
	procs map[int]procCPU
	self  int
	ok    bool
}

// procCPU is one process's entry in /proc/PID/stat.
type procCPU struct {
	ppid    int
	started uint64 // starttime: tells a process from a later one with its PID
	ticks   uint64 // utime, stime, cutime and cstime: its own and its reaped children's
}

// CPUShareSince returns the CPU time other processes used since m, and
// false where it cannot be read (no /proc).
func CPUShareSince(m CPUMark) (CPUShare, bool) {
	n := MarkCPU()
	if !m.ok || !n.ok {
		return CPUShare{}, false
	}
	return CPUShare{Seconds: n.at.Sub(m.at).Seconds(), Others: float64(othersBetween(m.procs, n.procs, n.self)) / ClockTicks}, true
}

// othersBetween sums what every process but self, its descendants and the
// kernel's threads (kthreadd, PID 2, and its children) added to its CPU
// time and its reaped children's between the readings a and b, in clock
// ticks. A process that started after a counts whole. One that ended
// before b counts through the process that reaped it, if that one
// outlived b; the time of one whose reaper ended too is lost, so the sum
// is a lower bound.
func othersBetween(a, b map[int]procCPU, self int) uint64 {
	ours := func(pid int) bool {
		for range 64 { // deeper than any process tree the bench makes
			if pid == self {
				return true
			}
			p, ok := b[pid]
			if !ok || pid <= 1 {
				return false
			}
			pid = p.ppid
		}
		return false
	}
	var sum uint64
	for pid, p := range b {
		if pid == 2 || p.ppid == 2 || ours(pid) {
			continue
		}
		before := uint64(0)
		if q, ok := a[pid]; ok && q.started == p.started {
			before = q.ticks
		}
		if p.ticks > before {
			sum += p.ticks - before
		}
	}
	return sum
}

// othersNoted is the average share of one CPU that other processes must
// have used over a measurement for its report to say so: less is the
// background of a quiet machine (a shell, a monitoring agent).
const othersNoted = 0.05

// BusyNote is the report's warning when other processes used the CPUs
// during the measurement: then they shared the sink's and the load's
// cores, and the whole-core figures hold some of their work.
func BusyNote(s CPUShare, cpus int) string {
	if s.Seconds <= 0 || s.Others < othersNoted*s.Seconds {
		return ""
	}
	return fmt.Sprintf("busy machine: other processes used at least %.1f CPU-s of %d CPUs over the %.0fs run (%.2f CPUs on average); "+
		"they shared the cores, and the core figures (core s/GiB, softirq, load core) count their work there too",
		s.Others, cpus, s.Seconds, s.Others/s.Seconds)
}
