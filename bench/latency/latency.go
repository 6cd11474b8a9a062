package latency

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
)

// LatencyConfig configures the `latency` command: an open-loop sweep of
// offered load with Poisson arrivals of timestamped fixed-size records,
// the Verona seed's latency-against-throughput curve.
type LatencyConfig struct {
	Loads    report.RateList // total offered loads, ascending
	Runners  report.StringList
	Rounds   int // sweeps, alternating the runners' order
	Sources  int
	Duration time.Duration // per point
	MsgSize  report.Size
	Arrivals string
	// GenPacing is the generator's pacing (GenConfig.Pacing).
	GenPacing string
	Skew      float64
	MaxDial   int
	Engine    harness.EngineFlags
	Pin       bool
	JSON      string
	Plot      string
	Exe       string
	// InProcess measures in this process, not a fresh child per point.
	InProcess bool
}

// DefaultLatencyConfig returns the documented defaults: 100 sources of
// 1 KiB records, 2 s per point, offered 8, 32, 128 and 512 MiB/s in all.
func DefaultLatencyConfig() LatencyConfig {
	return LatencyConfig{
		Loads:   report.RateList{8 << 20, 32 << 20, 128 << 20, 512 << 20},
		Sources: 100, Duration: 2 * time.Second, MsgSize: 1 << 10, Arrivals: load.ArrivalsPoisson,
		MaxDial: load.DefaultMaxDial, Pin: true, Rounds: 1,
	}
}

// RegisterFlags defines c's flags on fs.
func (c *LatencyConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Loads, "loads", "comma-separated total offered loads, e.g. 10MiB/s,50MiB/s")
	fs.Var(&c.Runners, "runners", "comma-separated runners (default: every one available)")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "sweep this many times, alternating the order; p99 ratios are printed as median (min-max)")
	fs.IntVar(&c.Sources, "sources", c.Sources, "concurrent TCP sources; each is offered load/sources")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long each point is measured")
	fs.Var(&c.MsgSize, "msg-size", "fixed record size; each record starts with a 16-byte header: scheduled and actual send times")
	fs.StringVar(&c.Arrivals, "arrivals", c.Arrivals, "poisson or uniform")
	fs.StringVar(&c.GenPacing, "gen-pacing", c.GenPacing, "how the generator writes its arrivals: "+load.PacingHelp+" (default "+load.DefaultPacing+")")
	fs.Float64Var(&c.Skew, "skew", c.Skew, "biased connections: a fraction F of the sources carries 1-F of the load")
	fs.IntVar(&c.MaxDial, "max-dial", c.MaxDial, "concurrent dials of the generator")
	fs.BoolVar(&c.Pin, "pin", c.Pin, "pin the engine and the generator to disjoint CPUs")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.Plot, "plot", c.Plot, "write SVG charts into `DIR`")
	fs.BoolVar(&c.InProcess, "in-process", c.InProcess, "host the engine in this process instead of a fresh child process per point")
	c.Engine.Register(fs)
	c.Engine.RegisterListen(fs)
}

// Validate checks c, naming the flag at fault.
func (c LatencyConfig) Validate() error {
	if len(c.Loads) == 0 {
		return errors.New("--loads: at least one load is needed")
	}
	if err := bench.ValidRunners(c.Runners); err != nil {
		return err
	}
	if c.Rounds < 0 {
		return fmt.Errorf("--rounds: %d: must not be negative", c.Rounds)
	}
	g := load.GenConfig{Addr: "-", Sources: c.Sources, Duration: c.Duration, MsgSize: c.MsgSize, Rate: 1,
		Arrivals: c.Arrivals, Pacing: c.GenPacing, Skew: c.Skew, MaxDial: c.MaxDial}
	if err := g.Validate(); err != nil {
		return err
	}
	return c.Engine.Validate()
}

// LatencyPoint is one runner at one offered load.
type LatencyPoint struct {
	OfferedBps float64 `json:"offered_bps"`
	Sweep      int     `json:"sweep"` // the round, from 0
	*bench.Result
}

// LatencyRatio is the first runner against another at one offered load,
// over the rounds.
type LatencyRatio struct {
	OfferedBps float64 `json:"offered_bps"`
	A          string  `json:"a"`
	B          string  `json:"b"`
	// GeneratorBound is set when either side was generator-bound in any
	// round at this load: then the ratios get no verdict.
	GeneratorBound bool                `json:"generator_bound"`
	Ratios         []bench.RatioSpread `json:"ratios"`
}

// LatencyReport is the JSON report of `latency`.
type LatencyReport struct {
	Command  string          `json:"command"` // "latency"
	Host     harness.Host    `json:"host"`
	Pinning  bench.Pinning   `json:"pinning"`
	Sources  int             `json:"sources"`
	MsgSize  int64           `json:"msg_size"`
	Arrivals string          `json:"arrivals"`
	Pacing   string          `json:"pacing"`
	Points   []LatencyPoint  `json:"points"`
	Ratios   []LatencyRatio  `json:"ratios"`
	Skipped  []bench.Skipped `json:"skipped"`
	OK       bool            `json:"ok"`
}

// LatencySweep runs the `latency` command.
func LatencySweep(ctx context.Context, c LatencyConfig, ios harness.IO) (*LatencyReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	exe, err := bench.Executable(c.Exe)
	if err != nil {
		return nil, err
	}
	runners, skipped, err := bench.PickRunners(c.Runners, harness.AllRunners(), nil)
	if err != nil {
		return nil, err
	}
	pin, unpin := bench.PinApart(c.Pin)
	defer unpin()
	rep := &LatencyReport{Command: "latency", Host: harness.HostInfo(), Pinning: pin, Sources: c.Sources,
		MsgSize: int64(c.MsgSize), Arrivals: c.Arrivals, Pacing: bench.Workload{Pacing: c.GenPacing}.GenPacing(), Skipped: skipped, OK: true}
	loads := slices.Clone(c.Loads)
	slices.Sort(loads)
	rounds := max(c.Rounds, 1)
	for round := range rounds {
		for li, load := range loads {
			order := slices.Clone(runners)
			if (li+round)%2 == 1 {
				slices.Reverse(order)
			}
			for _, name := range order {
				w := bench.Workload{Runner: name, Round: round*len(loads) + li, Sources: c.Sources, Duration: c.Duration, MsgSize: c.MsgSize,
					Rate: load / report.Rate(c.Sources), Arrivals: c.Arrivals, Pacing: c.GenPacing, Skew: c.Skew, MaxDial: c.MaxDial, Verify: true,
					Engine: c.Engine, Exe: exe, GenCPUs: pin.GenCPUs,
					Label: fmt.Sprintf("%s @ %s", name, report.FormatRate(float64(load)))}
				r, err := bench.MeasureRunner(ctx, w, ios, !c.InProcess)
				if err != nil {
					return nil, fmt.Errorf("bench: runner %s at %s: %w", name, report.FormatRate(float64(load)), err)
				}
				note := ""
				if r.GeneratorBound {
					note = ", generator-bound: " + r.GenBoundWhy
				}
				fmt.Fprintf(ios.Err, "%s: achieved %s, engine p99 %s, e2e p99 %s, gen lag p99 %s%s\n", w.Label, report.FormatRate(r.ThroughputBps),
					report.FormatNanos(r.LatencyNs.P99), report.FormatNanos(r.E2ELatencyNs.P99), report.FormatNanos(r.GenLagNs.P99), note)
				for _, m := range r.Mismatches {
					fmt.Fprintf(ios.Err, "MISMATCH %s: %s\n", w.Label, m)
				}
				rep.OK = rep.OK && r.Verified
				rep.Points = append(rep.Points, LatencyPoint{OfferedBps: float64(load), Sweep: round, Result: r})
			}
		}
	}
	rep.Ratios = latencyRatios(runners, loads, rep.Points)
	writeLatencyTable(ios.Out, rep, runners)
	for _, lr := range rep.Ratios {
		fmt.Fprintf(ios.Out, "%s/%s at %s:", lr.A, lr.B, report.FormatRate(lr.OfferedBps))
		for _, r := range lr.Ratios {
			fmt.Fprintf(ios.Out, " %.2fx %s (%.2f-%.2f),", r.Median, r.Metric, r.Min, r.Max)
		}
		if lr.GeneratorBound {
			fmt.Fprint(ios.Out, " [generator-bound: no verdict]")
		}
		fmt.Fprintln(ios.Out)
	}
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	if c.Plot != "" {
		if err := writeLatencyPlot(c.Plot, rep, runners, ios); err != nil {
			return rep, err
		}
	}
	if !rep.OK {
		return rep, bench.ErrMismatch
	}
	return rep, nil
}

// latencyRatios compares the first runner with each other one at every
// load: engine p99, end-to-end p99 and CPU-s/GiB, round by round.
func latencyRatios(runners []string, loads []report.Rate, points []LatencyPoint) []LatencyRatio {
	find := func(name string, load report.Rate, round int) *LatencyPoint {
		for i := range points {
			p := &points[i]
			if p.Runner == name && p.OfferedBps == float64(load) && p.Sweep == round {
				return p
			}
		}
		return nil
	}
	var out []LatencyRatio
	for _, other := range runners[min(1, len(runners)):] {
		for _, load := range loads {
			lr := LatencyRatio{OfferedBps: float64(load), A: runners[0], B: other}
			var p99, e2e, cpu []float64
			for round := 0; ; round++ {
				a, b := find(runners[0], load, round), find(other, load, round)
				if a == nil || b == nil {
					break
				}
				lr.GeneratorBound = lr.GeneratorBound || a.GeneratorBound || b.GeneratorBound
				if b.LatencyNs.P99 > 0 && b.E2ELatencyNs.P99 > 0 && b.CPUSPerGiB > 0 {
					p99 = append(p99, float64(a.LatencyNs.P99)/float64(b.LatencyNs.P99))
					e2e = append(e2e, float64(a.E2ELatencyNs.P99)/float64(b.E2ELatencyNs.P99))
					cpu = append(cpu, a.CPUSPerGiB/b.CPUSPerGiB)
				}
			}
			if len(p99) == 0 {
				continue
			}
			lr.Ratios = []bench.RatioSpread{bench.Spread("p99", p99), bench.Spread("e2e p99", e2e), bench.Spread("CPU-s/GiB", cpu)}
			out = append(out, lr)
		}
	}
	return out
}

func writeLatencyTable(w io.Writer, rep *LatencyReport, runners []string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered\trunner\tachieved\tp50\tp99\tp99.9\tmax\te2e p50\te2e p99\te2e max\tgen held\tgen lag p99\tCPU s/GiB\tverified\t")
	bound := 0
	for _, name := range runners {
		for _, p := range rep.Points {
			if p.Runner != name {
				continue
			}
			v := "ok"
			if !p.Verified {
				v = "FAIL"
			}
			held := fmt.Sprintf("%.1f%%", 100*p.GenHeld)
			if p.GeneratorBound {
				held += " (generator-bound)"
				bound++
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%s\t\n", report.FormatRate(p.OfferedBps), p.Runner, report.FormatRate(p.ThroughputBps),
				report.FormatNanos(p.LatencyNs.P50), report.FormatNanos(p.LatencyNs.P99), report.FormatNanos(p.LatencyNs.P999), report.FormatNanos(p.LatencyNs.Max),
				report.FormatNanos(p.E2ELatencyNs.P50), report.FormatNanos(p.E2ELatencyNs.P99), report.FormatNanos(p.E2ELatencyNs.Max),
				held, report.FormatNanos(p.GenLagNs.P99), p.CPUSPerGiB, v)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "p50-max: engine latency (delivery minus actual send); e2e: delivery minus scheduled send; gen lag: actual minus scheduled send")
	if bound > 0 {
		fmt.Fprintf(w, "%d point(s) generator-bound (held < %.0f%% of the offered load or gen lag p99 > %s): they measure the generator, not the engine\n",
			bound, 100*bench.MinHeld, report.FormatNanos(bench.MaxGenLagP99))
	}
	fmt.Fprintf(w, "kernel %s, %s; %d sources, %s records, %s arrivals; %s\n", rep.Host.Kernel, rep.Host.Go,
		rep.Sources, report.FormatBytes(uint64(rep.MsgSize)), rep.Arrivals, bench.PinNote(rep.Pinning))
}
