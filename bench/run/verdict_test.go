package run

import (
	"math"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/load"
)

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		xs               []float64
		median, min, max float64
	}{
		{nil, 0, 0, 0},
		{[]float64{1.2}, 1.2, 1.2, 1.2},
		{[]float64{1.3, 0.9}, 1.1, 0.9, 1.3},
		{[]float64{2, 0.5, 1}, 1, 0.5, 2},
	} {
		s := bench.Spread("x", tc.xs)
		if math.Abs(s.Median-tc.median) > 1e-12 || s.Min != tc.min || s.Max != tc.max {
			t.Errorf("spread(%v) = median %v min %v max %v, want %v %v %v", tc.xs, s.Median, s.Min, s.Max, tc.median, tc.min, tc.max)
		}
	}
}

func TestVerdict(t *testing.T) {
	le, _ := bench.ParseTarget("cpu_s_per_gib<=0.9")
	ge, _ := bench.ParseTarget("throughput >= 1")
	for _, tc := range []struct {
		t     bench.Target
		xs    []float64
		bound bool
		want  string
	}{
		{le, []float64{0.7, 0.85}, false, bench.VerdictMet},
		{le, []float64{0.9, 0.9}, false, bench.VerdictMet}, // on the bound counts
		{le, []float64{0.95, 1.2}, false, bench.VerdictMissed},
		{le, []float64{0.8, 1.0}, false, bench.VerdictInconclusive},
		{le, []float64{0.5}, true, bench.VerdictNone},
		{le, nil, false, bench.VerdictInconclusive},
		{ge, []float64{1.1, 1.3}, false, bench.VerdictMet},
		{ge, []float64{0.6, 0.99}, false, bench.VerdictMissed},
		{ge, []float64{0.9, 1.1}, false, bench.VerdictInconclusive},
	} {
		if got := bench.Verdict(tc.t, bench.Spread(tc.t.Metric, tc.xs), tc.bound); got != tc.want {
			t.Errorf("%s over %v (generator-bound %v) = %s, want %s", tc.t, tc.xs, tc.bound, got, tc.want)
		}
	}
	for _, bad := range []string{"cpu<=1", "throughput=1", "p99<=-1", "p99<=x"} {
		if _, err := bench.ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) accepted", bad)
		}
	}
}

func TestCompareRounds(t *testing.T) {
	res := func(runner string, round int, tput, cpu float64, bound bool) *bench.Result {
		return &bench.Result{Runner: runner, Round: round, ThroughputBps: tput, CPUSPerGiB: cpu, GeneratorBound: bound}
	}
	runs := []*bench.Result{
		res("uring", 0, 2, 0.4, false), res("goroutine", 0, 1, 0.5, false),
		res("goroutine", 1, 2, 0.5, false), res("uring", 1, 2, 0.6, false),
		res("uring", 2, 3, 0.5, false), res("goroutine", 2, 2, 0.5, false),
		res("epoll", 0, 1, 1, true), // a single round, generator-bound
	}
	cs := bench.CompareRounds([]string{"uring", "goroutine", "epoll"}, runs)
	if len(cs) != 2 {
		t.Fatalf("%d comparisons, want 2", len(cs))
	}
	tp, _ := cs[0].Ratio("throughput")
	if tp.Median != 1.5 || tp.Min != 1 || tp.Max != 2 || len(tp.PerRound) != 3 {
		t.Errorf("throughput ratio %+v", tp)
	}
	vs := bench.Judge([]bench.Target{{Metric: "cpu_s_per_gib", Op: "<=", Bound: 0.9}}, cs, false)
	if vs[0].Verdict != bench.VerdictInconclusive || vs[1].Verdict != bench.VerdictNone {
		t.Errorf("verdicts %+v", vs)
	}
	if line := bench.ComparisonLine(cs[0]); !strings.Contains(line, "1.50x throughput (1.00-2.00)") {
		t.Errorf("line %q", line)
	}
	if line := bench.ComparisonLine(cs[1]); !strings.Contains(line, "generator-bound") {
		t.Errorf("line %q lacks the generator-bound mark", line)
	}
}

func TestGeneratorBound(t *testing.T) {
	for _, tc := range []struct {
		paced bool
		held  float64
		lag   int64
		want  bool
	}{
		{true, 1, 200e3, false},
		{true, 0.98, 999e3, false},
		{true, 0.96, 0, true},
		{true, 1, 1.5e6, true},
		{false, 0.1, 0, false}, // unpaced: held does not apply
		{false, 1, 2e6, true},
	} {
		got, why := bench.GeneratorBound(tc.paced, tc.held, tc.lag)
		if got != tc.want || got != (why != "") {
			t.Errorf("generatorBound(%v, %v, %v) = %v %q, want %v", tc.paced, tc.held, tc.lag, got, why, tc.want)
		}
	}
	for _, tc := range []struct {
		eng, gen float64
		want     string
	}{
		{0.5, 0.97, bench.BottleneckGenerator},
		{0.95, 0.4, bench.BottleneckEngine},
		{0.95, 0.95, bench.BottleneckKernel},
		{0.85, 0.85, bench.BottleneckKernel},
		{0.5, 0.5, bench.BottleneckNeither},
	} {
		if got := bench.Bottleneck(tc.eng, tc.gen); got != tc.want {
			t.Errorf("bottleneck(%v, %v) = %s, want %s", tc.eng, tc.gen, got, tc.want)
		}
	}
}

func TestHeldFraction(t *testing.T) {
	for _, tc := range []struct {
		rep  load.GenReport
		want float64
	}{
		{load.GenReport{}, 1}, // unpaced
		{load.GenReport{OfferedBps: 1 << 20}, 1},
		{load.GenReport{OfferedBps: 1 << 20, ScheduledBytes: 1000, OnTimeBytes: 960}, 0.96},
		{load.GenReport{OfferedBps: 1 << 20, ScheduledBytes: 1000, OnTimeBytes: 1000}, 1},
	} {
		if got := tc.rep.HeldFraction(); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%+v: held %v, want %v", tc.rep, got, tc.want)
		}
	}
}

func TestCounterDeltas(t *testing.T) {
	c := bench.SumCounters([]bench.Counters{{Enters: 10, Completions: 30, Waits: 4, Wakeups: 2, Syscalls: 100}, {Enters: 10, Completions: 10, Syscalls: 28}}, 64<<20, 2)
	if c.CompletionsPerEnter != 2 || c.WaitsPerS != 2 || c.WakeupsPerS != 1 || c.SyscallsPerMiB != 2 {
		t.Errorf("counters %+v", c)
	}
}

func TestParseIPerf3(t *testing.T) {
	r, err := parseIPerf3([]byte(`{"start":{},"end":{"sum_received":{"bytes":8589934592,"seconds":2,"bits_per_second":3.4e10},
		"cpu_utilization_percent":{"host_total":95.5,"remote_total":40}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Runner != RunnerIPerf3 || r.Bytes != 8<<30 || r.ThroughputBps != 4<<30 || math.Abs(r.CPUSPerGiB-0.1) > 1e-12 ||
		r.Bottleneck != bench.BottleneckGenerator || !r.Verified {
		t.Errorf("parseIPerf3 = %+v", r)
	}
	for _, bad := range []string{`{"error":"unable to connect to server"}`, `{"end":{}}`, `nope`} {
		if _, err := parseIPerf3([]byte(bad)); err == nil {
			t.Errorf("parseIPerf3(%s) accepted", bad)
		}
	}
}

// TestJudgeByCore checks that on the veth wire a target on cpu_s_per_gib
// is judged by the receiving core's whole busy time, and by the sink
// process's CPU elsewhere.
func TestJudgeByCore(t *testing.T) {
	res := func(runner string, round int, cpu, core float64) *bench.Result {
		return &bench.Result{Runner: runner, Round: round, ThroughputBps: 1, CPUSPerGiB: cpu, CoreCPUSPerGiB: core}
	}
	// The process figures say uring is far cheaper; the cores say not.
	runs := []*bench.Result{res("uring", 0, 0.2, 0.55), res("epoll", 0, 0.4, 0.5), res("uring", 1, 0.2, 0.56), res("epoll", 1, 0.4, 0.52)}
	cs := bench.CompareRounds([]string{"uring", "epoll"}, runs)
	target := []bench.Target{{Metric: "cpu_s_per_gib", Op: "<=", Bound: 0.9}}
	for _, tc := range []struct {
		byCore bool
		want   string
		by     string
	}{{false, bench.VerdictMet, ""}, {true, bench.VerdictMissed, "core_cpu_s_per_gib"}} {
		vs := bench.Judge(target, cs, tc.byCore)
		if len(vs) != 1 || vs[0].Verdict != tc.want || vs[0].By != tc.by {
			t.Errorf("byCore %v: %+v, want %s by %q", tc.byCore, vs, tc.want, tc.by)
		}
	}
	if line := bench.ComparisonLine(cs[0]); !strings.Contains(line, "core CPU-s/GiB") {
		t.Errorf("line %q lacks the core ratio", line)
	}
}
