package bench

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	plotW, plotH           = 640, 400
	plotL, plotR           = 90, 20
	plotT, plotB           = 40, 60
	plotInnerW, plotInnerH = plotW - plotL - plotR, plotH - plotT - plotB
)

// plotColor is the i-th color of the palette.
func plotColor(i int) string {
	palette := [...]string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}
	return palette[i%len(palette)]
}

func svgOpen(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="22" text-anchor="middle" font-size="15">%s</text>`+"\n", plotW/2, html.EscapeString(title))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", plotL, plotT, plotL, plotT+plotInnerH)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", plotL, plotT+plotInnerH, plotL+plotInnerW, plotT+plotInnerH)
}

// barChart draws one bar per label, scaled to the largest value.
func barChart(title string, labels []string, vals []float64, format func(float64) string) string {
	var b strings.Builder
	svgOpen(&b, title)
	top := 0.0
	for _, v := range vals {
		top = math.Max(top, v)
	}
	if top == 0 {
		top = 1
	}
	n := max(len(vals), 1)
	slot := float64(plotInnerW) / float64(n)
	for i, v := range vals {
		h := v / top * plotInnerH
		x := plotL + slot*float64(i) + slot*0.15
		y := plotT + plotInnerH - h
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, slot*0.7, h, plotColor(i))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x+slot*0.35, y-5, html.EscapeString(format(v)))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x+slot*0.35, plotT+plotInnerH+18, html.EscapeString(labels[i]))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// series is one line of a line chart.
type series struct {
	Name   string
	Points [][2]float64 // x, y
}

// lineChart draws series on a linear x axis and a logarithmic y axis.
func lineChart(title, xLabel, yLabel string, ss []series, fx, fy func(float64) string) string {
	var b strings.Builder
	svgOpen(&b, title)
	xMax, yMin, yMax := 0.0, math.Inf(1), 0.0
	for _, s := range ss {
		for _, p := range s.Points {
			xMax = math.Max(xMax, p[0])
			if p[1] > 0 {
				yMin, yMax = math.Min(yMin, p[1]), math.Max(yMax, p[1])
			}
		}
	}
	if xMax == 0 || yMax == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	lo, hi := math.Floor(math.Log10(yMin)), math.Ceil(math.Log10(yMax))
	if hi == lo {
		hi++
	}
	px := func(x float64) float64 { return plotL + x/xMax*plotInnerW }
	py := func(y float64) float64 {
		return plotT + plotInnerH - (math.Log10(math.Max(y, yMin))-lo)/(hi-lo)*plotInnerH
	}
	for e := lo; e <= hi; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", plotL, y, plotL+plotInnerW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotL-5, y+4, html.EscapeString(fy(math.Pow(10, e))))
	}
	for i := 0; i <= 4; i++ {
		x := xMax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(x), plotT+plotInnerH+16, html.EscapeString(fx(x)))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", plotL+plotInnerW/2, plotH-15, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="15" y="%d" text-anchor="middle" transform="rotate(-90 15 %d)">%s</text>`+"\n", plotT+plotInnerH/2, plotT+plotInnerH/2, html.EscapeString(yLabel))
	for i, s := range ss {
		c := plotColor(i)
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p[0]), py(p[1]), c)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", plotL+10, plotT+15+15*i, c, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func writePlot(dir, name, svg string, ios IO) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: --plot: %w", err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(svg), 0o644); err != nil {
		return fmt.Errorf("bench: --plot: %w", err)
	}
	fmt.Fprintf(ios.Err, "sluice-bench: wrote %s\n", p)
	return nil
}
