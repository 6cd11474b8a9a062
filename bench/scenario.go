package bench

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
)

func ValidRunners(names []string) error {
	for i, r := range names {
		if !slices.Contains(harness.AllRunners(), r) {
			return fmt.Errorf("--runners: %q: must be among uring, epoll, goroutine, thread", r)
		}
		if slices.Contains(names[:i], r) {
			return fmt.Errorf("--runners: %s is named twice: each runner is one row", r)
		}
	}
	return nil
}

// ErrMismatch reports that the engine did not receive exactly what was
// sent. The report has already been written when it is returned.
var ErrMismatch = errors.New("bench: received bytes differ from those sent")

func RateOrUnlimited(r report.Rate) string {
	if r == 0 {
		return "unlimited"
	}
	return report.FormatRate(float64(r))
}

// WireNote is the progress line's and the table's account of the wire.
func WireNote(w harness.WireInfo) string {
	if w.Mode == harness.WireVeth {
		return fmt.Sprintf("wire veth: sink %s in %s (CPUs %v, rps_cpus %s), load %s in %s (CPUs %v, rps_cpus %s), TCP congestion control %s",
			w.SinkAddr, w.SinkNS, w.SinkCPUs, w.SinkRPS, w.LoadAddr, w.LoadNS, w.LoadCPUs, w.LoadRPS, w.Congestion)
	}
	if w.Reason != "" {
		return "wire loopback (" + w.Reason + ")"
	}
	return "wire loopback"
}

func PinNote(p Pinning) string {
	if p.Enabled {
		return fmt.Sprintf("engine on CPUs %v, generator on CPUs %v", p.EngineCPUs, p.GenCPUs)
	}
	return "no pinning: " + p.Note
}
