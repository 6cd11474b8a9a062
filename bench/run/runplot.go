package run

import (
	"fmt"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
)

// runRows returns, for each summary row in order, its per-round values of
// get.
func runRows(rep *RunReport, get func(*bench.Result) float64) []bench.SpreadSeries {
	var rows []bench.SpreadSeries
	for _, s := range rep.Summary {
		r := bench.SpreadSeries{Name: s.Runner}
		for _, run := range rep.Runs {
			if run.Runner == s.Runner {
				r.Rounds = append(r.Rounds, get(run))
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// writeRunPlots draws a run's throughput and CPU per GiB, each row with
// its spread over the rounds.
func writeRunPlots(dir string, rep *RunReport, ios harness.IO) error {
	client := "built-in generator"
	if rep.Config.Client == load.ClientFio {
		client = "fio"
	}
	sub := fmt.Sprintf("%d sources, %s, from %s; median of %d round(s), min-max", rep.Config.Sources,
		report.FormatBytes(uint64(rep.Config.MsgSize)), client, rep.Config.Rounds)
	gib := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	p, err := bench.SpreadChart("Throughput\n"+sub, "GiB/s", runRows(rep, func(r *bench.Result) float64 { return r.ThroughputBps / bench.Gibibyte }), gib)
	if err != nil {
		return err
	}
	if err := bench.SavePlot(p, dir, "throughput.svg", ios); err != nil {
		return err
	}
	p, err = bench.SpreadChart("CPU-seconds per GiB of the sink process\n"+sub, "CPU-s/GiB",
		runRows(rep, func(r *bench.Result) float64 { return r.CPUSPerGiB }), func(v float64) string { return fmt.Sprintf("%.3f", v) })
	if err != nil {
		return err
	}
	return bench.SavePlot(p, dir, "cpu.svg", ios)
}
