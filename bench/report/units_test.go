package report

import (
	"math"
	"testing"
)

func TestJainIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"all zero", []float64{0, 0}, 0},
		{"equal", []float64{5, 5, 5, 5}, 1},
		{"one takes all", []float64{8, 0, 0, 0}, 0.25},
		{"two of four", []float64{1, 1, 0, 0}, 0.5},
		{"textbook", []float64{1, 2, 3}, 36.0 / 42.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := JainIndex(tc.xs); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("JainIndex(%v) = %v, want %v", tc.xs, got, tc.want)
			}
		})
	}
}

func TestParseSizeAndRate(t *testing.T) {
	for in, want := range map[string]Size{"4096": 4096, "64KiB": 64 << 10, "16 KiB": 16 << 10, "1MiB": 1 << 20, "1MB": 1e6} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]Rate{"1MiB/s": 1 << 20, "500KB/s": 500e3, "0": 0, "unlimited": 0, "10MiB": 10 << 20} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"lots", "-5", "1XB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}
