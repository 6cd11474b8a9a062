package arrivals

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestAnalyseArrivals(t *testing.T) {
	const size = 1024
	us := int64(1000)
	conns := [][]arrival{
		// Three segments of one message each, 10 µs apart.
		{{ts: 100 * us, n: size}, {ts: 110 * us, n: size}, {ts: 120 * us, n: size}},
		// One write of two messages (two reads of one stamp), then one.
		{{ts: 105 * us, n: size}, {ts: 105 * us, n: size}, {ts: 125 * us, n: size}},
	}
	var st ArrivalStats
	analyseArrivals(&st, conns, size)
	if st.Messages != 6 || st.Segments != 5 {
		t.Errorf("messages %d, segments %d; want 6 and 5", st.Messages, st.Segments)
	}
	if math.Abs(st.Coalesced-2.0/6) > 1e-9 {
		t.Errorf("coalesced %.3f, want 2/6: the two messages of one segment", st.Coalesced)
	}
	if st.PerConn.Count != 3 || st.PerConn.Mean != float64(40*us)/3 {
		t.Errorf("per-connection gaps %+v, want 10, 10 and 20 µs", st.PerConn)
	}
	// Merged stamps 100, 105, 110, 120, 125: gaps of 5 µs but one of 10.
	if st.Merged.Count != 4 || st.Merged.P50 != 5*us || st.Merged.Under != 0 {
		t.Errorf("merged gaps %+v, want four gaps, median 5 µs, none under 5 µs", st.Merged)
	}
	if st.SegmentBytes != 6*size/5.0 {
		t.Errorf("segment bytes %.0f, want %d", st.SegmentBytes, 6*size/5)
	}
}

// TestPoissonDispersion checks the measures on a Poisson process, which
// must come out as the reference says, and on the same arrivals gathered
// into bursts, which must not.
func TestPoissonDispersion(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, mean = 200000, 15600.0 // ns
	stamps := make([]int64, n)
	at := 0.0
	for i := range stamps {
		at += rng.ExpFloat64() * mean
		stamps[i] = int64(at)
	}
	gaps := make([]int64, n-1)
	for i := 1; i < n; i++ {
		gaps[i-1] = stamps[i] - stamps[i-1]
	}
	g := gapStats(gaps)
	ref := poissonReference(1000, 64<<10, 1024).Merged
	if math.Abs(g.CV-1) > 0.02 || math.Abs(g.Mean/ref.Mean-1) > 0.02 || math.Abs(g.Under-ref.Under) > 0.01 {
		t.Errorf("Poisson gaps %+v, reference %+v", g, ref)
	}
	d := dispersion(stamps, stamps[0], stamps[n-1], 100000)
	if math.Abs(d.Index-1) > 0.1 {
		t.Errorf("index of dispersion of a Poisson process %.2f, want 1", d.Index)
	}
	// Every arrival moved to the next 50 µs tick: bursts.
	burst := make([]int64, n)
	for i, s := range stamps {
		burst[i] = (s/50000 + 1) * 50000
	}
	if d := dispersion(burst, burst[0], burst[n-1], 20000); d.Index < 2 {
		t.Errorf("index of dispersion of bursts %.2f, want far above 1", d.Index)
	}
}
