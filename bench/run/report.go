package run

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
)

// writeRunTable prints the per-runner summary table, then the ratios of
// the first runner to each of the others, with their spread over rounds.
func writeRunTable(w io.Writer, rep *RunReport) {
	c := rep.Config
	framed := c.Framing != "" && c.Framing != "none"
	writeResultTable(w, rep.Summary, tableKind{framed: framed, fio: c.Client == load.ClientFio, core: hasCore(rep.Summary)})
	writeComparisons(w, rep.Ratios, rep.Verdicts)
	writeQuietTable(w, rep.Summary, time.Duration(c.QuietEveryNs))
	for _, s := range rep.Failed {
		fmt.Fprintf(w, "failed %s: %s\n", s.Runner, s.Reason)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Runner, s.Reason)
	}
	fmt.Fprintf(w, "kernel %s, %s, %d CPUs; %s; %s\n", rep.Host.Kernel, rep.Host.Go, rep.Host.CPUs, bench.PinNote(rep.Pinning), bench.WireNote(rep.Wire))
	if hasCore(rep.Summary) {
		judged := "ratios and targets on cpu_s_per_gib use the sink process's CPU"
		if rep.Wire.Mode == harness.WireVeth {
			judged = "targets on cpu_s_per_gib are judged by the whole core"
		}
		fmt.Fprintf(w, "CPU s/GiB is the sink process's (getrusage); core s/GiB the sink's CPUs' whole busy time (user, nice, system, irq, softirq from /proc/stat), "+
			"softirq its softirq part, load core the load's CPUs' busy time, each per GiB received; %s\n", judged)
	}
	pacing := "unlimited rate"
	if c.RateBps > 0 {
		pacing = fmt.Sprintf("%s per source, %s arrivals, skew %g", report.FormatRate(c.RateBps), c.Arrivals, c.Skew)
		if c.Pacing != "" {
			pacing += ", " + c.Pacing + " pacing"
		}
	}
	msgs := "messages"
	if framed {
		msgs = c.Framing + " records"
	}
	client := "the built-in generator"
	if c.Client == load.ClientFio {
		client = "fio's net engine (TCP_NODELAY)"
		msgs = "writes"
		if framed {
			msgs = fmt.Sprintf("writes of %d-byte %s records", c.RecordSize, c.Framing)
		}
	}
	consumer := "on the engine's processing goroutines"
	if c.Inline {
		consumer = "inline, where each chunk was read (--inline)"
	}
	fmt.Fprintf(w, "workload: %d sources, %s %s, %s, %.1fs x %d round(s) per row, from %s; consumer %s\n",
		c.Sources, report.FormatBytes(uint64(c.MsgSize)), msgs, pacing, c.DurationS, c.Rounds, client, consumer)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// writeQuietTable writes, when the run had a quiet source, each row's
// latency of its lines: now minus the stamp, as the sink's handler got
// each line, over every round.
func writeQuietTable(w io.Writer, rs []*bench.Result, every time.Duration) {
	if every <= 0 {
		return
	}
	fmt.Fprintf(w, "\nquiet source: one connection beside the load sending its clock as a line every %v; latency of its lines, now minus the stamp, as each sink's handler got them\n", every)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "runner\tlines\tsent\tp50\tp99\tmax\t")
	for _, r := range rs {
		q := r.Quiet
		if q == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t\n", r.Runner)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t\n", r.Runner, q.Lines, q.Sent,
			report.FormatNanos(q.LatencyNs.P50), report.FormatNanos(q.LatencyNs.P99), report.FormatNanos(q.LatencyNs.Max))
	}
	tw.Flush()
}

// tableKind says which columns a result table has.
type tableKind struct {
	framed bool // records columns instead of latencies
	fio    bool // the client was fio: no latencies and no generator lag
	core   bool // whole-core columns
}

// hasCore reports whether any result has whole-core figures.
func hasCore(rs []*bench.Result) bool {
	for _, r := range rs {
		if r.CoreCPUS > 0 {
			return true
		}
	}
	return false
}

// coreCells are the whole-core cells of r, tab-separated, for the first
// table: core CPU-s/GiB (with its range over rounds), its softirq part,
// and the load's core.
func coreCells(r *bench.Result) string {
	if r.CoreCPUS == 0 {
		return "-\t-\t-"
	}
	core := fmt.Sprintf("%.3f", r.CoreCPUSPerGiB)
	if c := r.CoreRounds; c != nil {
		core = fmt.Sprintf("%s (%.3f-%.3f)", core, c.Min, c.Max)
	}
	return fmt.Sprintf("%s\t%.3f\t%.3f", core, r.CoreSoftirqSPerGiB, r.LoadCoreCPUSPerGiB)
}

// utilCells are the utilisation cells of the second table: the sink's and
// the load's processes, then with whole-core figures their cores.
func utilCells(r *bench.Result, k tableKind) string {
	s := fmt.Sprintf("%.0f%%\t%.0f%%", 100*r.EngineCPUUtil, 100*r.GenCPUUtil)
	if k.core {
		if r.CoreCPUS == 0 {
			return s + "\t-\t-"
		}
		s += fmt.Sprintf("\t%.0f%%\t%.0f%%", 100*r.CoreUtil, 100*r.LoadCoreUtil)
	}
	return s
}

// writeResultTable prints one row per result: what the engine did, then
// what the client did and the runner's own counters. Framed results, and
// every result under fio, have no latency columns (they measure none);
// framed ones have record columns. A row without latency figures (the gnet
// peer) shows "-" in them.
func writeResultTable(w io.Writer, rs []*bench.Result, k tableKind) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	coreHead := ""
	if k.core {
		coreHead = "\tcore s/GiB\tsoftirq\tload core"
	}
	cpuHead := "CPU s/GiB" + coreHead
	switch {
	case k.framed:
		fmt.Fprintln(tw, "runner\tthroughput\trecords/s\tbytes\trecords\tskipped\t"+cpuHead+"\tthreads\tRSS\tfairness\tpool waits\tpartials\tverified\t")
	case k.fio:
		fmt.Fprintln(tw, "runner\tthroughput\tbytes\t"+cpuHead+"\tthreads\tRSS\tfairness\tpool waits\tpartials\tverified\t")
	default:
		fmt.Fprintln(tw, "runner\tthroughput\tbytes\t"+cpuHead+"\tthreads\tRSS\tp50\tp99\tp99.9\tmax\te2e p99\te2e max\tfairness\tpool waits\tpartials\tverified\t")
	}
	for _, r := range rs {
		verified := "ok"
		if !r.Verified {
			verified = fmt.Sprintf("FAIL(%d)", len(r.Mismatches))
		}
		tput, cpu := report.FormatRate(r.ThroughputBps), fmt.Sprintf("%.3f", r.CPUSPerGiB)
		if t := r.ThroughputRounds; t != nil {
			tput = fmt.Sprintf("%s (%s)", tput, rateRange(t))
		}
		if c := r.CPURounds; c != nil {
			cpu = fmt.Sprintf("%s (%.3f-%.3f)", cpu, c.Min, c.Max)
		}
		if k.core {
			cpu += "\t" + coreCells(r)
		}
		switch {
		case k.framed:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%.4f\t%s\t%s\t%s\t\n",
				r.Runner, tput, humanize.Comma(int64(r.RecordsPerS)), report.FormatBytes(r.Bytes),
				humanize.Comma(int64(r.Records)), humanize.Comma(int64(r.RecordsSkipped)), cpu, r.ThreadsMax,
				report.FormatBytes(uint64(max(r.RSSMaxBytes, 0))),
				r.FairnessJain, humanize.Comma(int64(r.PoolWaits)), humanize.Comma(int64(r.PartialFlushes)), verified)
		case k.fio:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%.4f\t%s\t%s\t%s\t\n",
				r.Runner, tput, report.FormatBytes(r.Bytes), cpu, r.ThreadsMax,
				report.FormatBytes(uint64(max(r.RSSMaxBytes, 0))),
				r.FairnessJain, humanize.Comma(int64(r.PoolWaits)), humanize.Comma(int64(r.PartialFlushes)), verified)
		default:
			lat := func(ns int64) string {
				if r.LatencyNs.Count == 0 {
					return "-"
				}
				return report.FormatNanos(ns)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.4f\t%s\t%s\t%s\t\n",
				r.Runner, tput, report.FormatBytes(r.Bytes), cpu, r.ThreadsMax,
				report.FormatBytes(uint64(max(r.RSSMaxBytes, 0))),
				lat(r.LatencyNs.P50), lat(r.LatencyNs.P99), lat(r.LatencyNs.P999), lat(r.LatencyNs.Max),
				lat(r.E2ELatencyNs.P99), lat(r.E2ELatencyNs.Max),
				r.FairnessJain, humanize.Comma(int64(r.PoolWaits)), humanize.Comma(int64(r.PartialFlushes)), verified)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if k.fio {
		utilHead := "sink CPU\tfio CPU"
		if k.core {
			utilHead += "\tsink core\tfio core"
		}
		fmt.Fprintln(tw, "runner\tfio held\tfio sent\t"+utilHead+"\tlimit\tthroughput over\treads/s\tcompl/enter\twaits/s\tsyscalls/MiB\t")
		for _, r := range rs {
			limit := limitNote(r)
			if r.GeneratorBound {
				limit = "client-bound"
			}
			reads := "-"
			if r.Counters.Reads > 0 && r.DurationS > 0 {
				reads = humanize.Comma(int64(float64(r.Counters.Reads) / r.DurationS))
			}
			fmt.Fprintf(tw, "%s\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n", r.Runner, 100*r.GenHeld, report.FormatBytes(r.GenSentBytes),
				utilCells(r, k), limit, r.ThroughputOver, reads, perEnter(r.Counters),
				humanize.Comma(int64(r.Counters.WaitsPerS)), r.Counters.SyscallsPerMiB)
		}
		tw.Flush()
		for _, r := range rs {
			if r.GeneratorBound {
				fmt.Fprintf(w, "%s: client-bound: %s; no verdict for this row\n", r.Runner, r.GenBoundWhy)
			}
		}
		return
	}
	utilHead := "engine CPU\tgen CPU"
	if k.core {
		utilHead += "\tsink core\tgen core"
	}
	fmt.Fprintln(tw, "runner\tgen held\tgen lag p50\tgen lag p99\tgen lag max\t"+utilHead+"\tlimit\trx backlog/src\tcompl/enter\twaits/s\twakeups/s\tsyscalls/MiB\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n",
			r.Runner, 100*r.GenHeld, report.FormatNanos(r.GenLagNs.P50), report.FormatNanos(r.GenLagNs.P99), report.FormatNanos(r.GenLagNs.Max),
			utilCells(r, k), limitNote(r), backlogPerSource(r),
			perEnter(r.Counters), humanize.Comma(int64(r.Counters.WaitsPerS)), humanize.Comma(int64(r.Counters.WakeupsPerS)),
			r.Counters.SyscallsPerMiB)
	}
	tw.Flush()
	for _, r := range rs {
		if r.GeneratorBound {
			fmt.Fprintf(w, "%s: generator-bound: %s (its threads waited %.2f s per second for a CPU); no verdict for this row\n",
				r.Runner, r.GenBoundWhy, r.GenRunqueueWaitS/max(r.DurationS, 1e-9))
		}
	}
}

// rateRange prints a throughput's min-max in the unit FormatRate gives
// its median: GiB/s from 1 GiB/s, else MiB/s.
func rateRange(s *bench.RatioSpread) string {
	if s.Median >= bench.Gibibyte {
		return fmt.Sprintf("%.2f-%.2f", s.Min/bench.Gibibyte, s.Max/bench.Gibibyte)
	}
	return fmt.Sprintf("%.0f-%.0f", s.Min/(1<<20), s.Max/(1<<20))
}

// backlogPerSource is the rx backlog column: the mean bytes a source's
// connection held unread, or "-" for the iperf3 reference, which is not
// sampled.
func backlogPerSource(r *bench.Result) string {
	if r.Runner == RunnerIPerf3 || r.Sources <= 0 {
		return "-"
	}
	return report.FormatBytes(uint64(max(r.RxBacklogBytes, 0)) / uint64(r.Sources))
}

// limitNote is the limit column: generator-bound, or the bottleneck of an
// unpaced row, or "-".
func limitNote(r *bench.Result) string {
	switch {
	case r.GeneratorBound:
		return "generator-bound"
	case r.Bottleneck != "":
		return r.Bottleneck
	}
	return "-"
}

func perEnter(c bench.Counters) string {
	if c.Enters == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", c.CompletionsPerEnter)
}

// writeComparisons prints, for the first runner against each other one,
// every ratio's median over the rounds and its min-max range, then the
// verdict on each target.
func writeComparisons(w io.Writer, cs []bench.Comparison, vs []bench.TargetVerdict) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, c := range cs {
		fmt.Fprintln(w, bench.ComparisonLine(c))
	}
	for _, v := range vs {
		by := ""
		if v.By != "" {
			by = " by " + v.By
		}
		fmt.Fprintf(w, "target %s/%s %s%s: %s (median %.2f, range %.2f-%.2f)\n", v.A, v.B, v.Target, by, v.Verdict,
			v.Spread.Median, v.Spread.Min, v.Spread.Max)
	}
	fmt.Fprintln(w)
}
