//go:build invariants

package driver

import (
	"io"
	"testing"
	"time"
)

// TestInvariantsCatch breaks each rule the invariants build checks and
// requires a panic: a check that cannot fire checks nothing.
func TestInvariantsCatch(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", what)
			}
		}()
		f()
	}
	t0 := time.Unix(1000, 0)
	a, _, _ := newLane(t, nil, 4096, 4, time.Millisecond)
	b, _, _ := newLane(t, nil, 4096, 4, time.Millisecond)
	buf, _ := a.Lane().Account.TryAcquire()
	a.Hold(buf, t0)
	mustPanic("one buffer held by two lanes", func() { b.Hold(buf, t0) })
	a.Finish(io.EOF)
	mustPanic("a commit after Finish", func() { _, _ = a.Commit(1, t0) })
	mustPanic("a second Finish", func() { a.Finish(io.EOF) })
}
