package latency

import (
	"fmt"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

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
	p.X.Tick.Marker, p.Y.Tick.Marker = bench.Ticks125{}, bench.Ticks125{}
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
		var ep bench.ErrPoints
		for _, x := range bench.SortedLoads(byLoad) {
			s := bench.Spread(name, byLoad[x])
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
	return bench.SavePlot(p, dir, "latency.svg", ios)
}
