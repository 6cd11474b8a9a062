package latency

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
)

func TestLatencyPlot(t *testing.T) {
	dir := t.TempDir()
	ios := harness.IO{Out: io.Discard, Err: io.Discard}
	pt := func(runner string, load float64, sweep int, p99 int64, bound bool) LatencyPoint {
		r := &bench.Result{Runner: runner, GeneratorBound: bound}
		r.LatencyNs.P99 = p99
		return LatencyPoint{OfferedBps: load, Sweep: sweep, Result: r}
	}
	lrep := &LatencyReport{Sources: 100, MsgSize: 1024, Arrivals: load.ArrivalsPoisson, Pacing: load.PacingSpread, Points: []LatencyPoint{
		pt("uring", 8<<20, 0, 2e5, false), pt("uring", 8<<20, 1, 3e5, false), pt("uring", 64<<20, 0, 9e5, true),
		pt("goroutine", 8<<20, 0, 4e5, false), pt("goroutine", 64<<20, 0, 2e6, false)}}
	if err := writeLatencyPlot(dir, lrep, []string{"uring", "goroutine"}, ios); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "latency.svg")); err != nil || !strings.Contains(string(b), "generator-bound") {
		t.Errorf("latency.svg: %v, or no generator-bound mark", err)
	}
}

func TestLatencyRatiosMatchRoundsAndLoads(t *testing.T) {
	pt := func(runner string, load report.Rate, sweep int, p99 int64, cpu float64, bound bool) LatencyPoint {
		r := &bench.Result{Runner: runner, CPUSPerGiB: cpu, GeneratorBound: bound}
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
