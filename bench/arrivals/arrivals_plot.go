package arrivals

import (
	"fmt"
	"math"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

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
		p.X.Tick.Marker = bench.Ticks125{}
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
		if err := bench.SavePlot(p, dir, chart.file, ios); err != nil {
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
