package load

import (
	"math"
	"testing"
)

func TestPacerMeanGap(t *testing.T) {
	const rate, size = 1 << 20, 1024 // 1024 messages a second: ~976.6µs apart
	mean := float64(size) / rate * 1e9
	for _, arrivals := range []string{ArrivalsPoisson, ArrivalsUniform} {
		p, err := NewPacer(arrivals, rate, size, 42)
		if err != nil {
			t.Fatal(err)
		}
		const n = 20000
		first := p.Advance()
		var last int64
		var sq float64
		prev := first
		for range n {
			last = p.Advance()
			d := float64(last - prev)
			sq += (d - mean) * (d - mean)
			prev = last
		}
		got := float64(last-first) / n
		if math.Abs(got-mean)/mean > 0.03 {
			t.Errorf("%s: mean gap %.0fns, want %.0fns ±3%%", arrivals, got, mean)
		}
		sd := math.Sqrt(sq / n)
		switch arrivals {
		case ArrivalsPoisson: // exponential: standard deviation equals the mean
			if math.Abs(sd-mean)/mean > 0.05 {
				t.Errorf("poisson: gap sd %.0fns, want about %.0fns", sd, mean)
			}
		case ArrivalsUniform:
			if sd > 2 {
				t.Errorf("uniform: gap sd %.1fns, want ~0", sd)
			}
			if first < 0 || float64(first) > mean {
				t.Errorf("uniform: phase %d outside [0, %.0f)", first, mean)
			}
		}
	}
	if _, err := NewPacer("bursty", rate, size, 1); err == nil {
		t.Error("unknown arrival model accepted")
	}
	if _, err := NewPacer(ArrivalsPoisson, 0, size, 1); err == nil {
		t.Error("zero rate accepted")
	}
}

func TestSkewWeights(t *testing.T) {
	for _, tc := range []struct {
		n         int
		f         float64
		hot       int
		hotShare  float64 // fraction of the load on the hot sources
		uniformly bool
	}{
		{10, 0, 0, 0, true},
		{10, 0.2, 2, 0.8, false},
		{1000, 0.1, 100, 0.9, false},
		{3, 0.1, 1, 0.9, false},
		{1, 0.2, 0, 0, true},
		{10, 0.5, 5, 0.5, false},
	} {
		w := SkewWeights(tc.n, tc.f)
		var sum, hot float64
		for i, x := range w {
			sum += x
			if i < tc.hot {
				hot += x
			}
		}
		if math.Abs(sum-float64(tc.n)) > 1e-9 {
			t.Errorf("SkewWeights(%d, %v) sums to %v, want %d", tc.n, tc.f, sum, tc.n)
		}
		if tc.uniformly {
			for _, x := range w {
				if x != 1 {
					t.Errorf("SkewWeights(%d, %v) = %v, want all 1", tc.n, tc.f, w)
					break
				}
			}
			continue
		}
		if got := hot / sum; math.Abs(got-tc.hotShare) > 1e-9 {
			t.Errorf("SkewWeights(%d, %v): hot sources carry %v of the load, want %v", tc.n, tc.f, got, tc.hotShare)
		}
	}
}
