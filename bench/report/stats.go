package report

import (
	"math"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// JainIndex is Jain's fairness index of xs: (Σx)² / (n·Σx²). It is 1 when
// every x is equal and 1/n when one x takes everything. An empty or
// all-zero input has no fairness to speak of and yields 0.
func JainIndex(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if len(xs) == 0 || sq == 0 {
		return 0
	}
	j := sum * sum / (float64(len(xs)) * sq)
	return math.Min(j, 1) // rounding may overshoot by an ulp
}

// Latency bounds of the histograms: 1ns to one minute, three significant
// digits.
const (
	histMin     = 1
	HistMax     = int64(60e9)
	histSigFigs = 3
)

func NewHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, HistMax, histSigFigs) }

// Latency is a summary of delivery latencies, in nanoseconds.
type Latency struct {
	Count int64 `json:"count"`
	P50   int64 `json:"p50"`
	P99   int64 `json:"p99"`
	P999  int64 `json:"p999"`
	Max   int64 `json:"max"`
	Mean  int64 `json:"mean"`
}

// Summarize reads the percentiles out of h; a nil or empty h yields zeros.
func Summarize(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(),
		P50:   h.ValueAtQuantile(50),
		P99:   h.ValueAtQuantile(99),
		P999:  h.ValueAtQuantile(99.9),
		Max:   h.Max(),
		Mean:  int64(h.Mean()),
	}
}
