package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/sluice-io/sluice/bench/harness"
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

// SpreadSeries is one row of a spread chart: its value in every round.
type SpreadSeries struct {
	Name   string
	Rounds []float64
}

// ErrPoints are points with asymmetric Y errors, for plotter.NewYErrorBars.
type ErrPoints struct {
	plotter.XYs
	plotter.YErrors
}

// SpreadChart draws a bar per row at the median of its rounds, a dot for
// every round, and an error bar over the rounds' min-max, with the median
// written above. format prints a median.
func SpreadChart(title, yLabel string, rows []SpreadSeries, format func(float64) string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	var names []string
	var ep ErrPoints
	var labels plotter.XYLabels
	var dots plotter.XYs
	for i, r := range rows {
		if len(r.Rounds) == 0 {
			continue
		}
		s := Spread(r.Name, r.Rounds)
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

// Ticks125 marks a logarithmic axis at 1, 2 and 5 times the powers of
// ten, labelled, with unlabelled minor ticks between: a latency axis
// spans a decade or two, where plot.LogTicks would label one or two
// ticks only.
type Ticks125 struct{}

func (Ticks125) Ticks(lo, hi float64) []plot.Tick {
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

func SortedLoads(m map[float64][]float64) []float64 {
	xs := make([]float64, 0, len(m))
	for x := range m {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	return xs
}

// SavePlot writes p into dir under name.
func SavePlot(p *plot.Plot, dir, name string, ios harness.IO) error {
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
