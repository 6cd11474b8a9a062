package srcs_test

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

func TestBackoffDelay(t *testing.T) {
	const ms = time.Millisecond
	fixed := func(r float64) func() float64 { return func() float64 { return r } }
	tests := []struct {
		name    string
		b       srcs.Backoff
		attempt int
		rnd     float64
		want    time.Duration
	}{
		{"defaults first, low", srcs.Backoff{}, 0, 0, 25 * ms},
		{"defaults first, mid", srcs.Backoff{}, 0, 0.5, 37500 * time.Microsecond},
		{"defaults second", srcs.Backoff{}, 1, 0, 50 * ms},
		{"defaults third", srcs.Backoff{}, 2, 0.5, 150 * ms},
		{"defaults capped", srcs.Backoff{}, 10, 0, 2500 * ms},
		{"defaults capped, high", srcs.Backoff{}, 10, 0.999999, 5*time.Second - 2500*time.Nanosecond},
		{"huge attempt stays capped", srcs.Backoff{}, 1 << 30, 0, 2500 * ms},
		{"custom", srcs.Backoff{Initial: 10 * ms, Max: 100 * ms}, 3, 0, 40 * ms},
		{"custom cap not a power of two", srcs.Backoff{Initial: 10 * ms, Max: 70 * ms}, 3, 0, 35 * ms},
		{"max below initial is raised", srcs.Backoff{Initial: 80 * ms, Max: 10 * ms}, 4, 0, 40 * ms},
		{"max near overflow", srcs.Backoff{Initial: time.Second, Max: time.Duration(1<<63 - 1)}, 100, 0, time.Duration(1<<63-1) / 2},
		{"broken rnd is clamped", srcs.Backoff{}, 0, 7, 25 * ms},
		{"negative attempt is the first", srcs.Backoff{}, -3, 0, 25 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Delay(tt.attempt, fixed(tt.rnd)); got != tt.want {
				t.Errorf("Delay(%d, %v) = %v, want %v", tt.attempt, tt.rnd, got, tt.want)
			}
		})
	}
}

// TestBackoffDelayBounds checks the equal-jitter envelope with real
// randomness: every delay lies in [c/2, c) for its ceiling c, and never
// passes Max.
func TestBackoffDelayBounds(t *testing.T) {
	b := srcs.Backoff{Initial: time.Millisecond, Max: 300 * time.Millisecond}
	for attempt := range 20 {
		c := min(time.Millisecond<<attempt, b.Max)
		for range 200 {
			d := b.Delay(attempt, nil)
			if d < c/2 || d >= c {
				t.Fatalf("attempt %d: delay %v outside [%v, %v)", attempt, d, c/2, c)
			}
		}
	}
}

func TestBackoffWithDefaults(t *testing.T) {
	got := srcs.Backoff{Attempts: 3}.WithDefaults()
	want := srcs.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Attempts: 3}
	if got != want {
		t.Errorf("WithDefaults = %+v, want %+v", got, want)
	}
}
