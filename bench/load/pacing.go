package load

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Arrival models of the open-loop generator.
const (
	// ArrivalsPoisson spaces messages by exponentially distributed gaps:
	// a Poisson process, the Verona seed's load model.
	ArrivalsPoisson = "poisson"
	// ArrivalsUniform spaces messages evenly, after a random phase so
	// that sources do not fire in lockstep.
	ArrivalsUniform = "uniform"
)

// pacer yields the arrival times of one source's messages, in nanoseconds
// after the start, for a mean gap of meanNs. The generator stamps each
// message with its arrival time, not with when it was written, so a
// generator that falls behind shows up as latency (no coordinated
// omission). Not safe for concurrent use.
type pacer struct {
	rng     *rand.Rand
	meanNs  float64
	poisson bool
	next    float64
}

// NewPacer returns a pacer for msgSize-byte messages at rate bytes per
// second. rate must be positive.
func NewPacer(arrivals string, rate float64, msgSize int, seed uint64) (*pacer, error) {
	if rate <= 0 || msgSize <= 0 {
		return nil, fmt.Errorf("bench: pacer: rate %v and message size %d must be positive", rate, msgSize)
	}
	p := &pacer{rng: rand.New(rand.NewPCG(seed, 0x70616365)), meanNs: float64(msgSize) / rate * 1e9}
	switch arrivals {
	case ArrivalsPoisson:
		p.poisson = true
		p.next = p.rng.ExpFloat64() * p.meanNs
	case ArrivalsUniform:
		p.next = p.rng.Float64() * p.meanNs
	default:
		return nil, fmt.Errorf("bench: pacer: arrivals %q: must be poisson or uniform", arrivals)
	}
	return p, nil
}

// peek returns the next arrival time without consuming it.
func (p *pacer) peek() int64 { return int64(p.next) }

// Advance consumes the next arrival and returns it.
func (p *pacer) Advance() int64 {
	at := p.next
	if p.poisson {
		p.next += p.rng.ExpFloat64() * p.meanNs
	} else {
		p.next += p.meanNs
	}
	return int64(at)
}

// SkewWeights returns the share of the offered load each of n sources
// gets, as weights averaging 1 (source i is offered rate·w[i]). The model
// follows the Verona seed's biased connections: with skew f in (0, 0.5),
// the first k = round(f·n) sources (at least one) are hot and together
// carry a fraction 1−f of the load, the others share the remaining f; so
// f = 0.2 means 20% of the sources carry 80% of the bytes. f = 0 (or a
// split that leaves no cold source) gives every source weight 1, and
// f = 0.5 is also uniform.
func SkewWeights(n int, f float64) []float64 {
	w := make([]float64, n)
	k := int(math.Round(f * float64(n)))
	if f > 0 && k == 0 {
		k = 1
	}
	if f <= 0 || k >= n {
		for i := range w {
			w[i] = 1
		}
		return w
	}
	hot := float64(n) * (1 - f) / float64(k)
	cold := float64(n) * f / float64(n-k)
	for i := range w {
		if i < k {
			w[i] = hot
		} else {
			w[i] = cold
		}
	}
	return w
}
