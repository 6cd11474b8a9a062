package harness

import (
	"cmp"
	"slices"
	"time"
)

// UsageSample is a sink's CPU time (user plus system, since it started
// listening) and the bytes it had received at one moment of a run.
type UsageSample struct {
	UnixNs int64  `json:"unix_ns"`
	CPUNs  int64  `json:"cpu_ns"`
	Bytes  uint64 `json:"bytes"`
}

// UsageSampleEvery is how often a sink records a UsageSample.
const UsageSampleEvery = 100 * time.Millisecond

// MaxUsageSamples bounds a sink's samples (about 3 hours' worth at
// UsageSampleEvery); AppendUsage thins them beyond it.
const MaxUsageSamples = 1 << 17

// AppendUsage adds u to us. Beyond MaxUsageSamples it first drops every
// other sample but the first and the last, so that a sink left running
// for days keeps a bounded, evenly spread record.
func AppendUsage(us []UsageSample, u UsageSample) []UsageSample {
	if len(us) >= MaxUsageSamples {
		k := 0
		for i := range us {
			if i%2 == 0 || i == len(us)-1 {
				us[k] = us[i]
				k++
			}
		}
		us = us[:k]
	}
	return append(us, u)
}

// UsageOver returns the CPU time and the bytes received between a and b
// (UnixNano), each end interpolated linearly between the samples around
// it. ok is false when the samples do not cover [a, b] or the interval
// holds fewer than two sampling periods, too short to be read this way.
func UsageOver(us []UsageSample, a, b int64) (cpu time.Duration, bytes uint64, ok bool) {
	if len(us) < 2 || b-a < 2*int64(UsageSampleEvery) ||
		a < us[0].UnixNs || b > us[len(us)-1].UnixNs {
		return 0, 0, false
	}
	ca, ba := usageAt(us, a)
	cb, bb := usageAt(us, b)
	if cb < ca || bb < ba {
		return 0, 0, false
	}
	return time.Duration(cb - ca), uint64(bb - ba), true
}

// usageAt interpolates the CPU time and bytes at t, which the samples
// cover.
func usageAt(us []UsageSample, t int64) (cpu, bytes float64) {
	i, _ := slices.BinarySearchFunc(us, t, func(u UsageSample, t int64) int { return cmp.Compare(u.UnixNs, t) })
	// us[i] is the first sample at or after t.
	if i == 0 || us[i].UnixNs == t {
		return float64(us[i].CPUNs), float64(us[i].Bytes)
	}
	lo, hi := us[i-1], us[i]
	f := float64(t-lo.UnixNs) / float64(hi.UnixNs-lo.UnixNs)
	return float64(lo.CPUNs) + f*float64(hi.CPUNs-lo.CPUNs), float64(lo.Bytes) + f*float64(hi.Bytes-lo.Bytes)
}
