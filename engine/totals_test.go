package engine

import (
	"testing"
	"time"
)

func TestTotalsLatencyBuckets(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {latencyBase, 0}, {latencyBase + 1, 1}, {2 * latencyBase, 1},
		{2*latencyBase + 1, 2}, {time.Millisecond, 6}, {LatencyBounds[latencyBuckets-1], latencyBuckets - 1},
		{time.Minute, latencyBuckets},
	} {
		var tt totals
		tt.took(&Chunk{FirstByte: now.Add(-tc.d)}, now)
		s := tt.snapshot()
		got := -1
		for i, n := range s.Latency.Counts {
			if n == 1 {
				got = i
			}
		}
		if s.Latency.Over == 1 {
			got = latencyBuckets
		}
		if got != tc.want || s.Latency.Count != 1 || s.Latency.Sum != tc.d || s.Delivered != 1 {
			t.Errorf("%v: bucket %d (want %d), count %d, sum %v", tc.d, got, tc.want, s.Latency.Count, s.Latency.Sum)
		}
		if got < latencyBuckets && tc.d > LatencyBounds[got] {
			t.Errorf("%v above its bucket's bound %v", tc.d, LatencyBounds[got])
		}
	}
}

func TestTotalsRecordAllocatesNothing(t *testing.T) {
	var tt totals
	c := Chunk{FirstByte: time.Now()}
	if n := testing.AllocsPerRun(100, func() {
		tt.emitted(100, 0)
		tt.took(&c, time.Now())
	}); n != 0 {
		t.Fatalf("recording allocates %v times per chunk", n)
	}
}
