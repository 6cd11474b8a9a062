package driver

import (
	"reflect"
	"testing"
	"time"
)

// TestLaneSize holds the lane machine to its size: a runner keeps one per
// connection, most of them idle (docs/decisions/0013-accept-on-the-rings.md).
func TestLaneSize(t *testing.T) {
	// The invariants build's checks take room of their own.
	if n, checks := reflect.TypeFor[Lane]().Size(), reflect.TypeFor[invariants]().Size(); n-checks > 64 {
		t.Errorf("driver.Lane is %d bytes (%d of them the invariants build's), more than 64 besides those", n, checks)
	}
}

// TestStamp checks that a stamp keeps a time to the nanosecond on the
// monotonic clock, and that zero stands for none.
func TestStamp(t *testing.T) {
	if !stamp(0).time().IsZero() {
		t.Error("the zero stamp is not the zero time")
	}
	now := time.Now()
	for _, at := range []time.Time{now, now.Add(time.Nanosecond), now.Add(90 * 24 * time.Hour), epoch, time.Unix(1000, 0)} {
		s := stampOf(at)
		if s == 0 {
			t.Fatalf("stampOf(%v) is zero", at)
		}
		if got := s.time(); got.Sub(at).Abs() > time.Nanosecond {
			t.Errorf("stampOf(%v).time() = %v", at, got)
		}
	}
	if a, b := stampOf(now), stampOf(now.Add(time.Microsecond)); b-a != stamp(time.Microsecond) {
		t.Errorf("a microsecond apart: stamps %d apart", b-a)
	}
}
