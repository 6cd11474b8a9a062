package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench/report"
)

func TestFileRatiosPerRound(t *testing.T) {
	results := []FileResult{
		{Method: "read-loop", Round: 0, VsReadLoop: 1, VsFio: 0.9},
		{Method: "fio-psync", Round: 0, VsReadLoop: 1.1, VsFio: 1},
		{Method: "uring", Round: 0, VsReadLoop: 0.8, VsFio: 0.7},
		{Method: "uring", Round: 1, VsReadLoop: 0.6, VsFio: 0.5},
		{Method: "uring", Round: 2, VsReadLoop: 0.7, VsFio: 0.9},
	}
	got := fileRatios(results)
	if len(got) != 2 {
		t.Fatalf("%d ratios, want uring over fio and over the read loop: %+v", len(got), got)
	}
	fio := got[0]
	if fio.Metric != "uring/fio-psync throughput" || fio.Median != 0.7 || fio.Min != 0.5 || fio.Max != 0.9 {
		t.Errorf("vs fio: %+v, want median 0.7 over 0.5-0.9", fio)
	}
	if loop := got[1]; loop.Median != 0.7 || loop.Min != 0.6 || loop.Max != 0.8 {
		t.Errorf("vs read loop: %+v, want median 0.7 over 0.6-0.8", loop)
	}
}

func TestLatencyRatiosMatchRoundsAndLoads(t *testing.T) {
	pt := func(runner string, load report.Rate, sweep int, p99 int64, cpu float64, bound bool) LatencyPoint {
		r := &Result{Runner: runner, CPUSPerGiB: cpu, GeneratorBound: bound}
		r.LatencyNs.P99, r.E2ELatencyNs.P99 = p99, 2*p99
		return LatencyPoint{OfferedBps: float64(load), Sweep: sweep, Result: r}
	}
	points := []LatencyPoint{
		pt("uring", 8, 0, 90, 1, false), pt("goroutine", 8, 0, 100, 2, false),
		pt("uring", 8, 1, 120, 1, false), pt("goroutine", 8, 1, 100, 2, false),
		pt("uring", 64, 0, 50, 1, false), pt("goroutine", 64, 0, 100, 1, true),
	}
	got := latencyRatios([]string{"uring", "goroutine"}, []report.Rate{8, 64}, points)
	if len(got) != 2 {
		t.Fatalf("%d comparisons, want one per load: %+v", len(got), got)
	}
	at8 := got[0]
	if p := at8.Ratios[0]; p.Metric != "p99" || p.Min != 0.9 || p.Max != 1.2 || len(p.PerRound) != 2 {
		t.Errorf("p99 at 8: %+v, want 0.9 and 1.2 over two rounds", p)
	}
	if c := at8.Ratios[2]; c.Median != 0.5 || at8.GeneratorBound {
		t.Errorf("CPU at 8: %+v (bound %v), want 0.5 and no generator bound", c, at8.GeneratorBound)
	}
	if !got[1].GeneratorBound {
		t.Error("a generator-bound point must mark its load's comparison")
	}
}

func TestSummaryMedians(t *testing.T) {
	r := func(bps, cpu float64) *Result {
		return &Result{Runner: "uring", Bytes: 1 << 30, DurationS: 1, ThroughputBps: bps, CPUSPerGiB: cpu, CPUS: cpu}
	}
	s := mergeResults([]*Result{r(3e9, 0.5), r(1e9, 0.9), r(2e9, 0.6)})
	if s.ThroughputBps != 2e9 || s.CPUSPerGiB != 0.6 {
		t.Errorf("summary %.0f B/s, %.2f CPU-s/GiB; want the medians 2e9 and 0.6", s.ThroughputBps, s.CPUSPerGiB)
	}
	if c := s.CPURounds; c == nil || c.Min != 0.5 || c.Max != 0.9 {
		t.Errorf("CPU spread %+v, want 0.5-0.9", c)
	}
	var buf bytes.Buffer
	writeResultTable(&buf, []*Result{s}, tableKind{fio: true})
	if !strings.Contains(buf.String(), "0.600 (0.500-0.900)") || !strings.Contains(buf.String(), "(0.93-2.79)") {
		t.Errorf("table does not show the spreads:\n%s", buf.String())
	}
	one := r(3e9, 0.5)
	one.ThroughputOver = ThroughputAllSending
	if s := mergeResults([]*Result{one}); s.CPURounds != nil || s.ThroughputBps != 3e9 || s.ThroughputOver != ThroughputAllSending {
		t.Errorf("a single round's summary: spread %+v, %.0f B/s over %q; want none, its own 3e9 over %q",
			s.CPURounds, s.ThroughputBps, s.ThroughputOver, ThroughputAllSending)
	}
}
