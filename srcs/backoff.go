package srcs

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults of Backoff, applied where a field is zero.
const (
	DefaultBackoffInitial = 50 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
)

// WithDefaults returns b with its zero fields set to their defaults, and Max
// raised to Initial if it is lower.
func (b Backoff) WithDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	return b
}

// Validate reports a negative field, naming it under prefix (the field
// that holds b: "Backoff"), as the clients' constructors check theirs.
func (b Backoff) Validate(prefix string) error {
	switch {
	case b.Initial < 0:
		return fmt.Errorf("%s.Initial: %v is negative", prefix, b.Initial)
	case b.Max < 0:
		return fmt.Errorf("%s.Max: %v is negative", prefix, b.Max)
	case b.Attempts < 0:
		return fmt.Errorf("%s.Attempts: %d is negative", prefix, b.Attempts)
	}
	return nil
}

// Delay returns how long to wait before retry number attempt (0 for the
// first retry after a failure), with the defaults applied.
//
// It uses "equal jitter": the ceiling c = min(Max, Initial·2^attempt) is
// split in half, and the delay is c/2 plus a uniformly random part of the
// other half, so it lies in [c/2, c). Full jitter (uniform in [0, c))
// spreads reconnecting clients a little better, but it may pick a delay
// near zero, and a source that is refused at once would then redial
// almost at once; equal jitter keeps a floor that still grows.
//
// rnd returns a float in [0, 1); nil means math/rand/v2's Float64. Tests
// pass a fixed function to make the delay deterministic.
func (b Backoff) Delay(attempt int, rnd func() float64) time.Duration {
	b = b.WithDefaults()
	c := b.Initial
	for i := 0; i < attempt && c < b.Max; i++ {
		if c > b.Max/2 {
			c = b.Max // doubling would pass Max (or overflow)
			break
		}
		c *= 2
	}
	c = min(c, b.Max)
	if rnd == nil {
		rnd = rand.Float64
	}
	r := rnd()
	if r < 0 || r >= 1 {
		r = 0 // a broken source of randomness must not push past Max
	}
	half := c / 2
	return half + time.Duration(r*float64(c-half))
}
