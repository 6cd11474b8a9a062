package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Ratio metrics: each is a figure of a Result, compared as first runner
// over another one.
var ratioMetrics = []struct {
	name  string // as in a Target
	label string // in the printed line
	get   func(*Result) float64
}{
	{"throughput", "throughput", func(r *Result) float64 { return r.ThroughputBps }},
	{"cpu_s_per_gib", "CPU-s/GiB", func(r *Result) float64 { return r.CPUSPerGiB }},
	// The receiving core's whole busy time per GiB: on the veth wire,
	// what a target on cpu_s_per_gib is judged by (see judge).
	{"core_cpu_s_per_gib", "core CPU-s/GiB", func(r *Result) float64 { return r.CoreCPUSPerGiB }},
	{"p99", "p99", func(r *Result) float64 { return float64(r.LatencyNs.P99) }},
	{"e2e_p99", "e2e p99", func(r *Result) float64 { return float64(r.E2ELatencyNs.P99) }},
	{"rss", "RSS", func(r *Result) float64 { return float64(r.RSSMaxBytes) }},
	{"threads", "threads", func(r *Result) float64 { return float64(r.ThreadsMax) }},
	{"syscalls_per_mib", "syscalls/MiB", func(r *Result) float64 { return r.Counters.SyscallsPerMiB }},
}

// RatioSpread is one ratio (first runner over another) over the rounds.
type RatioSpread struct {
	Metric   string    `json:"metric"`
	Median   float64   `json:"median"`
	Min      float64   `json:"min"`
	Max      float64   `json:"max"`
	PerRound []float64 `json:"per_round"`
}

// Comparison is the first runner against another one, round by round.
type Comparison struct {
	A string `json:"a"`
	B string `json:"b"`
	// GeneratorBound is set when either side was generator-bound in any
	// round: then no ratio gets a verdict.
	GeneratorBound bool          `json:"generator_bound"`
	Ratios         []RatioSpread `json:"ratios"`
}

// Ratio returns the spread of the named metric, or false.
func (c Comparison) Ratio(metric string) (RatioSpread, bool) {
	for _, r := range c.Ratios {
		if r.Metric == metric {
			return r, true
		}
	}
	return RatioSpread{}, false
}

// Spread summarises per-round values: median, min and max. An empty input
// yields zeros.
func Spread(metric string, xs []float64) RatioSpread {
	s := RatioSpread{Metric: metric, PerRound: xs}
	if len(xs) == 0 {
		return s
	}
	v := slices.Clone(xs)
	slices.Sort(v)
	s.Min, s.Max = v[0], v[len(v)-1]
	if n := len(v); n%2 == 1 {
		s.Median = v[n/2]
	} else {
		s.Median = (v[n/2-1] + v[n/2]) / 2
	}
	return s
}

// CompareRounds computes, for the first runner against each other one,
// every ratio in every round where both were measured, and its spread.
func CompareRounds(runners []string, runs []*Result) []Comparison {
	if len(runners) < 2 {
		return nil
	}
	type key struct {
		runner string
		round  int
	}
	by := map[key]*Result{}
	rounds := 0
	for _, r := range runs {
		by[key{r.Runner, r.Round}] = r
		rounds = max(rounds, r.Round+1)
	}
	var out []Comparison
	a := runners[0]
	for _, b := range runners[1:] {
		c := Comparison{A: a, B: b}
		vals := make([][]float64, len(ratioMetrics))
		for round := range rounds {
			ra, rb := by[key{a, round}], by[key{b, round}]
			if ra == nil || rb == nil {
				continue
			}
			c.GeneratorBound = c.GeneratorBound || ra.GeneratorBound || rb.GeneratorBound
			for i, m := range ratioMetrics {
				if x, y := m.get(ra), m.get(rb); y != 0 {
					vals[i] = append(vals[i], x/y)
				}
			}
		}
		for i, m := range ratioMetrics {
			if len(vals[i]) > 0 {
				c.Ratios = append(c.Ratios, Spread(m.name, vals[i]))
			}
		}
		out = append(out, c)
	}
	return out
}

// ComparisonLine prints a comparison: "uring/goroutine: 1.23x throughput
// (1.10-1.30), ..."; the range only with more than one round.
func ComparisonLine(c Comparison) string {
	var parts []string
	for _, m := range ratioMetrics {
		s, ok := c.Ratio(m.name)
		if !ok {
			continue
		}
		p := strconv.FormatFloat(s.Median, 'f', 2, 64) + "x " + m.label
		if len(s.PerRound) > 1 {
			p += fmt.Sprintf(" (%.2f-%.2f)", s.Min, s.Max)
		}
		parts = append(parts, p)
	}
	line := fmt.Sprintf("%s/%s: %s", c.A, c.B, strings.Join(parts, ", "))
	if c.GeneratorBound {
		line += " [generator-bound: no verdict]"
	}
	return line
}

// Verdicts.
const (
	VerdictMet          = "met"
	VerdictMissed       = "missed"
	VerdictInconclusive = "inconclusive"
	VerdictNone         = "no verdict" // generator-bound
)

// Target is a bound on a ratio, such as "cpu_s_per_gib<=0.9": the first
// runner's CPU-seconds per GiB at most 0.9 times the other's.
type Target struct {
	Metric string  `json:"metric"`
	Op     string  `json:"op"` // "<=" or ">="
	Bound  float64 `json:"bound"`
}

func (t Target) String() string {
	return t.Metric + t.Op + strconv.FormatFloat(t.Bound, 'g', -1, 64)
}

// ParseTarget parses "METRIC<=X" or "METRIC>=X" (spaces allowed), where
// METRIC is one of throughput, cpu_s_per_gib,
// core_cpu_s_per_gib, p99, e2e_p99, rss, threads,
// syscalls_per_mib.
func ParseTarget(s string) (Target, error) {
	for _, op := range []string{"<=", ">="} {
		m, v, ok := strings.Cut(s, op)
		if !ok {
			continue
		}
		t := Target{Metric: strings.TrimSpace(m), Op: op}
		if !knownMetric(t.Metric) {
			return Target{}, fmt.Errorf("bench: target %q: unknown metric %q", s, t.Metric)
		}
		b, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || b <= 0 {
			return Target{}, fmt.Errorf("bench: target %q: bound must be a positive number", s)
		}
		t.Bound = b
		return t, nil
	}
	return Target{}, fmt.Errorf("bench: target %q: want METRIC<=X or METRIC>=X", s)
}

// Verdict judges a ratio's spread against t: met only if the whole
// min-max range is on the right side of the bound, missed only if it is
// all on the wrong side, otherwise inconclusive. A generator-bound
// comparison gets no verdict.
func Verdict(t Target, s RatioSpread, generatorBound bool) string {
	if generatorBound {
		return VerdictNone
	}
	if len(s.PerRound) == 0 {
		return VerdictInconclusive
	}
	ok := func(x float64) bool {
		if t.Op == "<=" {
			return x <= t.Bound
		}
		return x >= t.Bound
	}
	switch {
	case ok(s.Min) && ok(s.Max):
		return VerdictMet
	case !ok(s.Min) && !ok(s.Max):
		return VerdictMissed
	}
	return VerdictInconclusive
}

// TargetVerdict is one target judged for one comparison.
type TargetVerdict struct {
	A       string      `json:"a"`
	B       string      `json:"b"`
	Target  string      `json:"target"`
	Spread  RatioSpread `json:"spread"`
	Verdict string      `json:"verdict"`
	// By names the ratio judged when it is not the target's own metric:
	// core_cpu_s_per_gib for a cpu_s_per_gib target on the veth wire.
	By string `json:"by,omitempty"`
}

// TargetList is a comma-separated list of targets (a flag).
type TargetList []Target

func (l *TargetList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, t := range *l {
		s[i] = t.String()
	}
	return strings.Join(s, ",")
}

// Set parses a comma-separated list and appends it.
func (l *TargetList) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		t, err := ParseTarget(f)
		if err != nil {
			return err
		}
		*l = append(*l, t)
	}
	return nil
}

// Judge applies every target to every comparison. With byCore (the veth
// wire, where each side's core does its own receive work) a target on
// cpu_s_per_gib is judged by the receiving core's whole busy time per
// GiB: a process's CPU time holds only the part of the kernel's receive
// work that happened to run in its context, and how much that is depends
// on how the sink waits, not on what it costs.
func Judge(ts []Target, cs []Comparison, byCore bool) []TargetVerdict {
	var out []TargetVerdict
	for _, c := range cs {
		for _, t := range ts {
			m, by := t.Metric, ""
			if byCore && m == "cpu_s_per_gib" {
				if _, ok := c.Ratio("core_cpu_s_per_gib"); ok {
					m, by = "core_cpu_s_per_gib", "core_cpu_s_per_gib"
				}
			}
			s, _ := c.Ratio(m)
			out = append(out, TargetVerdict{A: c.A, B: c.B, Target: t.String(), Spread: s, Verdict: Verdict(t, s, c.GeneratorBound), By: by})
		}
	}
	return out
}

func knownMetric(name string) bool {
	for _, m := range ratioMetrics {
		if m.name == name {
			return true
		}
	}
	return false
}
