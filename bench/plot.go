package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Charts are drawn with gonum.org/v1/plot and saved as SVG, 6 by 4
// inches. The format follows the file name's extension, so a caller may
// ask for .png or .pdf as well.
const (
	plotWidth  = 6 * vg.Inch
	plotHeight = 4 * vg.Inch
)

// spreadSeries is one row of a spread chart: its value in every round.
type spreadSeries struct {
	Name   string
	Rounds []float64
}

// errPoints are points with asymmetric Y errors, for plotter.NewYErrorBars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

// spreadChart draws a bar per row at the median of its rounds, a dot for
// every round, and an error bar over the rounds' min-max, with the median
// written above. format prints a median.
func spreadChart(title, yLabel string, rows []spreadSeries, format func(float64) string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	var names []string
	var ep errPoints
	var labels plotter.XYLabels
	var dots plotter.XYs
	for i, r := range rows {
		if len(r.Rounds) == 0 {
			continue
		}
		s := spread(r.Name, r.Rounds)
		b, err := plotter.NewBarChart(plotter.Values{s.Median}, vg.Points(36))
		if err != nil {
			return nil, err
		}
		b.XMin = float64(len(names))
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		p.Add(b)
		x := float64(len(names))
		ep.XYs = append(ep.XYs, plotter.XY{X: x, Y: s.Median})
		ep.YErrors = append(ep.YErrors, struct{ Low, High float64 }{s.Median - s.Min, s.Max - s.Median})
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: s.Max})
		labels.Labels = append(labels.Labels, format(s.Median))
		for _, v := range r.Rounds {
			dots = append(dots, plotter.XY{X: x, Y: v})
		}
		names = append(names, r.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("bench: plot %q: no data", title)
	}
	eb, err := plotter.NewYErrorBars(ep)
	if err != nil {
		return nil, err
	}
	eb.LineStyle.Width = vg.Points(1.2)
	sc, err := plotter.NewScatter(dots)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(2)
	lb, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].YAlign = draw.YBottom
		lb.TextStyle[i].XAlign = draw.XCenter
	}
	lb.Offset = vg.Point{Y: vg.Points(4)}
	p.Add(eb, sc, lb)
	p.NominalX(names...)
	p.Y.Max *= 1.12 // room for the labels
	p.Add(plotter.NewGrid())
	return p, nil
}

// runRows returns, for each summary row in order, its per-round values of
// get.
func runRows(rep *RunReport, get func(*Result) float64) []spreadSeries {
	var rows []spreadSeries
	for _, s := range rep.Summary {
		r := spreadSeries{Name: s.Runner}
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
	if rep.Config.Client == ClientFio {
		client = "fio"
	}
	sub := fmt.Sprintf("%d sources, %s, from %s; median of %d round(s), min-max", rep.Config.Sources,
		report.FormatBytes(uint64(rep.Config.MsgSize)), client, rep.Config.Rounds)
	gib := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	p, err := spreadChart("Throughput\n"+sub, "GiB/s", runRows(rep, func(r *Result) float64 { return r.ThroughputBps / gibibyte }), gib)
	if err != nil {
		return err
	}
	if err := savePlot(p, dir, "throughput.svg", ios); err != nil {
		return err
	}
	p, err = spreadChart("CPU-seconds per GiB of the sink process\n"+sub, "CPU-s/GiB",
		runRows(rep, func(r *Result) float64 { return r.CPUSPerGiB }), func(v float64) string { return fmt.Sprintf("%.3f", v) })
	if err != nil {
		return err
	}
	return savePlot(p, dir, "cpu.svg", ios)
}

// writeLatencyPlot draws the sweep's engine p99 against offered load per
// runner, both axes logarithmic: the median over the sweeps, with an
// error bar over their min-max, and a cross where a sweep was
// generator-bound.
func writeLatencyPlot(dir string, rep *LatencyReport, runners []string, ios harness.IO) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("p99 engine latency against offered load\n%d sources, %s records, %s arrivals, %s pacing",
		rep.Sources, report.FormatBytes(uint64(rep.MsgSize)), rep.Arrivals, rep.Pacing)
	p.X.Label.Text = "offered load (MiB/s)"
	p.Y.Label.Text = "p99 latency (ms)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = ticks125{}, ticks125{}
	p.Legend.Top = true
	p.Legend.Left = true
	drawn := 0
	for i, name := range runners {
		byLoad := map[float64][]float64{}
		var bound plotter.XYs
		for _, pt := range rep.Points {
			if pt.Runner != name || pt.LatencyNs.P99 <= 0 {
				continue
			}
			x, y := pt.OfferedBps/(1<<20), float64(pt.LatencyNs.P99)/1e6
			byLoad[x] = append(byLoad[x], y)
			if pt.GeneratorBound {
				bound = append(bound, plotter.XY{X: x, Y: y})
			}
		}
		if len(byLoad) == 0 {
			continue
		}
		var ep errPoints
		for _, x := range sortedLoads(byLoad) {
			s := spread(name, byLoad[x])
			ep.XYs = append(ep.XYs, plotter.XY{X: x, Y: s.Median})
			ep.YErrors = append(ep.YErrors, struct{ Low, High float64 }{s.Median - s.Min, s.Max - s.Median})
		}
		line, pts, err := plotter.NewLinePoints(ep.XYs)
		if err != nil {
			return err
		}
		line.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		line.Width = vg.Points(1.5)
		pts.Shape = plotutil.Shape(i)
		eb, err := plotter.NewYErrorBars(ep)
		if err != nil {
			return err
		}
		eb.Color = plotutil.Color(i)
		p.Add(line, pts, eb)
		p.Legend.Add(name, line, pts)
		if len(bound) > 0 {
			sc, err := plotter.NewScatter(bound)
			if err != nil {
				return err
			}
			sc.Shape, sc.Color, sc.Radius = draw.CrossGlyph{}, plotutil.Color(i), vg.Points(5)
			p.Add(sc)
			if drawn == 0 {
				p.Legend.Add("generator-bound", sc)
			}
		}
		drawn++
	}
	if drawn == 0 {
		return nil // nothing measured a latency
	}
	p.Add(plotter.NewGrid())
	return savePlot(p, dir, "latency.svg", ios)
}

// ticks125 marks a logarithmic axis at 1, 2 and 5 times the powers of
// ten, labelled, with unlabelled minor ticks between: a latency axis
// spans a decade or two, where plot.LogTicks would label one or two
// ticks only.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

func sortedLoads(m map[float64][]float64) []float64 {
	xs := make([]float64, 0, len(m))
	for x := range m {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	return xs
}

// cdfQuantiles are the quantiles a gap distribution is kept at for its
// chart (ArrivalStats.MergedCDF and ConnCDF).
var cdfQuantiles = func() []float64 {
	q := make([]float64, 0, 99)
	for i := 1; i < 100; i++ {
		q = append(q, float64(i)/100)
	}
	return q
}()

// writeArrivalsPlots draws the distribution (CDF, log time axis) of the
// gaps between arrivals, merged over all connections and per connection,
// for every client and sink beside the Poisson reference.
func writeArrivalsPlots(dir string, rep *ArrivalsReport, ios harness.IO) error {
	for _, chart := range []struct {
		file, title, unit string
		scale             float64
		get               func(ArrivalStats) []int64
	}{
		{"arrivals-merged.svg", "Gaps between consecutive segments, all connections", "µs", 1e3,
			func(s ArrivalStats) []int64 { return s.MergedCDF }},
		{"arrivals-conn.svg", "Gaps between one connection's segments", "ms", 1e6,
			func(s ArrivalStats) []int64 { return s.ConnCDF }},
	} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s\n%d sources at %s in %s messages", chart.title, rep.Poisson.Sources,
			report.FormatRate(rep.Poisson.OfferedBps/float64(max(rep.Poisson.Sources, 1))), report.FormatBytes(uint64(rep.Poisson.SegmentBytes)))
		p.X.Label.Text = "gap (" + chart.unit + ")"
		p.Y.Label.Text = "fraction of gaps at most this long"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = ticks125{}
		p.Y.Min, p.Y.Max = 0, 1
		// A CDF leaves the bottom right empty.
		p.Legend.Top = false
		p.Legend.Left = false
		for i, st := range append([]ArrivalStats{rep.Poisson}, rep.Clients...) {
			qs := chart.get(st)
			var xys plotter.XYs
			for j, v := range qs {
				if v > 0 && j < len(cdfQuantiles) {
					xys = append(xys, plotter.XY{X: float64(v) / chart.scale, Y: cdfQuantiles[j]})
				}
			}
			if len(xys) < 2 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
			if st.Client == "poisson" {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
			p.Legend.Add(arrivalsName(st), l)
		}
		p.Add(plotter.NewGrid())
		if err := savePlot(p, dir, chart.file, ios); err != nil {
			return err
		}
	}
	return nil
}

// arrivalsName names a row of the arrivals report.
func arrivalsName(st ArrivalStats) string {
	name := st.Client
	if st.Pacing != "" {
		name += " (" + st.Pacing + ")"
	}
	if st.Sink != "" {
		name += " into " + st.Sink
	}
	return name
}

// quantilesOf returns sorted xs at cdfQuantiles.
func quantilesOf(sorted []int64) []int64 {
	if len(sorted) == 0 {
		return nil
	}
	out := make([]int64, len(cdfQuantiles))
	for i, q := range cdfQuantiles {
		out[i] = sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
	}
	return out
}

// expQuantiles are an exponential distribution's quantiles with mean m.
func expQuantiles(m float64) []int64 {
	out := make([]int64, len(cdfQuantiles))
	for i, q := range cdfQuantiles {
		out[i] = int64(-math.Log(1-q) * m)
	}
	return out
}

// savePlot writes p into dir under name.
func savePlot(p *plot.Plot, dir, name string, ios harness.IO) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: --plot: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("bench: --plot: %w", err)
	}
	fmt.Fprintf(ios.Err, "sluice-bench: wrote %s\n", path)
	return nil
}
