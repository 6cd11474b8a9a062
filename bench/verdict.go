package bench

import (
	"fmt"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
)

// Limits of a generator that holds its offered load.
const (
	// MinHeld is the fraction of the offered load the generator must
	// write within the duration.
	MinHeld = 0.97
	// MaxGenLagP99 is the largest generator lag p99, in ns.
	MaxGenLagP99 = int64(1e6)
)

// GeneratorBound says whether a row's figures measure the generator
// rather than the engine, and why.
func GeneratorBound(paced bool, held float64, lagP99 int64) (bool, string) {
	switch {
	case paced && held < MinHeld:
		return true, fmt.Sprintf("sent %.1f%% of the offered load (< %.0f%%)", 100*held, 100*MinHeld)
	case lagP99 > MaxGenLagP99:
		return true, fmt.Sprintf("generator lag p99 %s (> %s)", report.FormatNanos(lagP99), report.FormatNanos(MaxGenLagP99))
	}
	return false, ""
}

// Saturation thresholds of CPU utilisation for naming a bottleneck.
const (
	saturated = 0.9 // busy this much of the time: the side is the limit
	notBusy   = 0.8 // and the other side below this
)

// Bottlenecks of an unpaced row.
const (
	BottleneckGenerator = "generator"
	BottleneckEngine    = "engine"
	BottleneckKernel    = "kernel/both"
	// BottleneckNeither: neither side's CPUs were busy; the limit was
	// elsewhere (waiting, softirq work, or a neighbour taking the CPUs).
	BottleneckNeither = "neither"
)

// Bottleneck names what limited an unpaced row from each side's CPU
// utilisation (fractions of the CPUs it may use): the generator when its
// CPUs were saturated while the engine's were not, the engine in the
// opposite case, the kernel or both when both were busy (loopback copies
// are charged to whichever side makes the call), and neither when
// neither was.
func Bottleneck(engUtil, genUtil float64) string {
	switch {
	case engUtil < notBusy && genUtil < notBusy:
		return BottleneckNeither
	case genUtil >= saturated && engUtil < notBusy:
		return BottleneckGenerator
	case engUtil >= saturated && genUtil < notBusy:
		return BottleneckEngine
	}
	return BottleneckKernel
}

// NameBottleneck names what limited r: on the veth wire from each side's
// whole core, since each does its own receive work there and a process's
// CPU time holds only the part of it that happened to run in its context;
// elsewhere from each process's CPU.
func (r *Result) NameBottleneck() string {
	if r.Wire == harness.WireVeth && r.CoreUtil > 0 {
		return Bottleneck(r.CoreUtil, r.LoadCoreUtil)
	}
	return Bottleneck(r.EngineCPUUtil, r.GenCPUUtil)
}

// Counters are a runner's own counters over the measured interval, and
// what they say per unit of work.
type Counters struct {
	Reads       uint64 `json:"reads"`
	Waits       uint64 `json:"waits"`
	Wakeups     uint64 `json:"wakeups"`
	Enters      uint64 `json:"enters"`
	Completions uint64 `json:"completions"`
	Syscalls    uint64 `json:"syscalls"`
	// CompletionsPerEnter is the batching the runner achieved: CQEs or
	// readiness events per io_uring_enter, epoll_wait or poll. 0 when it
	// made no enters (the goroutine runner leaves them to Go).
	CompletionsPerEnter float64 `json:"completions_per_enter"`
	WaitsPerS           float64 `json:"waits_per_s"`
	WakeupsPerS         float64 `json:"wakeups_per_s"`
	SyscallsPerMiB      float64 `json:"syscalls_per_mib"`
}

func SumRunnerStats(rs []engine.RunnerStats) engine.RunnerStats {
	var t engine.RunnerStats
	for _, r := range rs {
		t = t.Add(r)
	}
	return t
}

// CounterDeltas turns two snapshots into the interval's counters.
func CounterDeltas(a, b engine.RunnerStats, bytes uint64, seconds float64) Counters {
	c := Counters{Reads: b.Reads - a.Reads, Waits: b.Waits - a.Waits, Wakeups: b.Wakeups - a.Wakeups,
		Enters: b.Enters - a.Enters, Completions: b.Completions - a.Completions, Syscalls: b.Syscalls - a.Syscalls}
	c.derive(bytes, seconds)
	return c
}

func (c *Counters) derive(bytes uint64, seconds float64) {
	c.CompletionsPerEnter, c.WaitsPerS, c.WakeupsPerS, c.SyscallsPerMiB = 0, 0, 0, 0
	if c.Enters > 0 {
		c.CompletionsPerEnter = float64(c.Completions) / float64(c.Enters)
	}
	if seconds > 0 {
		c.WaitsPerS = float64(c.Waits) / seconds
		c.WakeupsPerS = float64(c.Wakeups) / seconds
	}
	if bytes > 0 {
		c.SyscallsPerMiB = float64(c.Syscalls) / (float64(bytes) / (1 << 20))
	}
}

// SumCounters adds rounds' counters and derives the rates over the sum.
func SumCounters(cs []Counters, bytes uint64, seconds float64) Counters {
	var t Counters
	for _, c := range cs {
		t.Reads += c.Reads
		t.Waits += c.Waits
		t.Wakeups += c.Wakeups
		t.Enters += c.Enters
		t.Completions += c.Completions
		t.Syscalls += c.Syscalls
	}
	t.derive(bytes, seconds)
	return t
}
