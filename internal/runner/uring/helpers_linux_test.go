package uring

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newRing creates a ring on the current (locked) goroutine and closes it when
// the test ends, checking that nothing is left in flight.
func newRing(t *testing.T, cfg Config) *Ring {
	t.Helper()
	requireURing(t)
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := r.InFlight(); n != 0 {
			t.Errorf("InFlight after Close = %d", n)
		}
	})
	return r
}

func newArena(t *testing.T, size int) *Arena {
	t.Helper()
	a, err := NewArena(size)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last in, first out: make arenas before the ring that
	// uses them, so the ring closes (and drains) before they are unmapped.
	t.Cleanup(func() { a.Close() })
	return a
}

func alloc[T any](t *testing.T, a *Arena) *T {
	t.Helper()
	v, err := ArenaAlloc[T](a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func allocBytes(t *testing.T, a *Arena, n int) []byte {
	t.Helper()
	b, err := a.Alloc(n, 64)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func socketpair(t *testing.T, typ int) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func sqe(t *testing.T, r *Ring) *SQE {
	t.Helper()
	s, err := r.NextSQE()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reap submits, then waits for and consumes n CQEs, returning copies.
func reap(t *testing.T, r *Ring, n int) []CQE {
	t.Helper()
	var out []CQE
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d CQEs before the deadline: %+v", len(out), n, out)
		}
		if _, err := r.SubmitAndWaitTimeout(uint32(n-len(out)), time.Second); err != nil {
			t.Fatal(err)
		}
		r.ForEachCQE(func(c *CQE) { out = append(out, *c) })
	}
	return out
}

// byUserData indexes CQEs, failing on duplicates.
func byUserData(t *testing.T, cqes []CQE) map[uint64]CQE {
	t.Helper()
	m := make(map[uint64]CQE, len(cqes))
	for _, c := range cqes {
		if _, dup := m[c.UserData]; dup {
			t.Fatalf("two CQEs for user_data %d: %+v", c.UserData, cqes)
		}
		m[c.UserData] = c
	}
	return m
}

func wantRes(t *testing.T, what string, c CQE, want int32) {
	t.Helper()
	if c.Res != want {
		t.Errorf("%s: res = %d (%v), want %d (%v)", what, c.Res, c.Err(), want, errnoOf(want))
	}
}

func errnoOf(res int32) error {
	if res >= 0 {
		return nil
	}
	return unix.Errno(-res)
}

func isErrno(err error, e unix.Errno) bool { return errors.Is(err, e) }
