package run

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench"
)

func TestSummaryMedians(t *testing.T) {
	r := func(bps, cpu float64) *bench.Result {
		return &bench.Result{Runner: "uring", Bytes: 1 << 30, DurationS: 1, ThroughputBps: bps, CPUSPerGiB: cpu, CPUS: cpu}
	}
	s := bench.MergeResults([]*bench.Result{r(3e9, 0.5), r(1e9, 0.9), r(2e9, 0.6)})
	if s.ThroughputBps != 2e9 || s.CPUSPerGiB != 0.6 {
		t.Errorf("summary %.0f B/s, %.2f CPU-s/GiB; want the medians 2e9 and 0.6", s.ThroughputBps, s.CPUSPerGiB)
	}
	if c := s.CPURounds; c == nil || c.Min != 0.5 || c.Max != 0.9 {
		t.Errorf("CPU spread %+v, want 0.5-0.9", c)
	}
	var buf bytes.Buffer
	writeResultTable(&buf, []*bench.Result{s}, tableKind{fio: true})
	if !strings.Contains(buf.String(), "0.600 (0.500-0.900)") || !strings.Contains(buf.String(), "(0.93-2.79)") {
		t.Errorf("table does not show the spreads:\n%s", buf.String())
	}
	one := r(3e9, 0.5)
	one.ThroughputOver = bench.ThroughputAllSending
	if s := bench.MergeResults([]*bench.Result{one}); s.CPURounds != nil || s.ThroughputBps != 3e9 || s.ThroughputOver != bench.ThroughputAllSending {
		t.Errorf("a single round's summary: spread %+v, %.0f B/s over %q; want none, its own 3e9 over %q",
			s.CPURounds, s.ThroughputBps, s.ThroughputOver, bench.ThroughputAllSending)
	}
}
