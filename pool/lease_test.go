package pool

import (
	"context"
	"errors"
	"testing"
)

// TestReleaseLeaseOnCopies: several holders of one lease may each release
// it; the first release frees the buffer, and the others free nothing, even
// once the buffer has been lent to someone else.
func TestReleaseLeaseOnCopies(t *testing.T) {
	for _, tc := range []struct {
		name string
		// relend lends the buffer out again between the releases.
		relend bool
	}{
		{"second copy while the buffer is free", false},
		{"second copy after the buffer was lent again", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, Config{BufSize: 4096, Buffers: 1})
			a, other := p.Join(1), p.Join(2)
			defer a.Leave()
			defer other.Leave()
			b, ok := a.TryAcquire()
			if !ok {
				t.Fatal("no buffer")
			}
			lease := b.Lease()
			if !p.ReleaseLease(b, lease) {
				t.Fatal("the first release of a lease was refused")
			}
			var again *Buf
			if tc.relend {
				if again, ok = other.TryAcquire(); !ok || again != b {
					t.Fatal("the buffer was not lent again")
				}
			}
			if p.ReleaseLease(b, lease) {
				t.Fatal("a second release of the same lease freed the buffer")
			}
			st := p.Stats()
			if st.StaleReleases != 1 || st.Released != 1 {
				t.Fatalf("stats %+v: want 1 release and 1 stale release", st)
			}
			if tc.relend {
				if st.InUse != 1 || other.Stats().Held != 1 {
					t.Fatalf("the new holder lost its buffer: %+v", st)
				}
				again.Bytes() // still held: must not panic
				again.Release()
			}
		})
	}
}

// TestDoubleReleaseStillPanics: Release, which trusts its caller to hold
// the buffer, keeps failing loudly on a second release.
func TestDoubleReleaseStillPanics(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 1})
	a := p.Join(1)
	defer a.Leave()
	b, _ := a.TryAcquire()
	b.Release()
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("a double Release did not panic")
		}
	}()
	b.Release()
}

func TestReleaseLeaseDoesNotAllocate(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 4})
	a := p.Join(1)
	defer a.Leave()
	allocs := testing.AllocsPerRun(1000, func() {
		b, ok := a.TryAcquire()
		if !ok {
			panic("acquire failed")
		}
		lease := b.Lease()
		p.ReleaseLease(b, lease)
		p.ReleaseLease(b, lease)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per acquire and release", allocs)
	}
}

// TestCloseWhenIdle: the pool unmaps at once when nothing is held, or at
// the release of the last buffer held, and lends nothing meanwhile.
func TestCloseWhenIdle(t *testing.T) {
	for _, tc := range []struct {
		name string
		held int
	}{
		{"idle", 0},
		{"one held", 1},
		{"three held", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{BufSize: 4096, Buffers: 4, MaxPerSource: 4})
			if err != nil {
				t.Fatal(err)
			}
			a := p.Join(1)
			var held []*Buf
			for range tc.held {
				b, ok := a.TryAcquire()
				if !ok {
					t.Fatal("no buffer")
				}
				held = append(held, b)
			}
			if err := p.CloseWhenIdle(); err != nil {
				t.Fatal(err)
			}
			if _, ok := a.TryAcquire(); ok {
				t.Fatal("a closing pool lent a buffer")
			}
			if _, err := a.Acquire(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatalf("Acquire on a closing pool: %v, want ErrClosed", err)
			}
			for i, b := range held {
				if p.Stats().Closed {
					t.Fatalf("unmapped with %d buffers still held", len(held)-i)
				}
				b.Release()
			}
			if !p.Stats().Closed {
				t.Fatal("not unmapped once every buffer came home")
			}
			a.Leave()
			if err := p.Close(); err != nil {
				t.Fatalf("Close after CloseWhenIdle: %v", err)
			}
		})
	}
}

// TestCancelOfAGrantWhileClosing: a buffer reserved for a waiter that
// cancels after CloseWhenIdle goes on to the next waiter, as a released
// one does, and the slab is unmapped only once that waiter releases it:
// it is never lent out of an unmapped slab.
func TestCancelOfAGrantWhileClosing(t *testing.T) {
	p, err := New(Config{BufSize: 4096, Buffers: 1})
	if err != nil {
		t.Fatal(err)
	}
	owner, first, second := p.Join(0), p.Join(1), p.Join(2)
	b, ok := owner.TryAcquire()
	if !ok {
		t.Fatal("no buffer")
	}
	var rec recorder
	for _, a := range []*Account{first, second} {
		if _, ok, err := a.Wait(rec.notifier(a)); ok || err != nil {
			t.Fatalf("Wait on a dry pool: ok %v, err %v", ok, err)
		}
	}
	if err := p.CloseWhenIdle(); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if got := rec.take(); len(got) != 1 || got[0] != first {
		t.Fatal("the released buffer did not go to the first waiter")
	}
	first.Cancel()
	if got := rec.take(); len(got) != 1 || got[0] != second {
		t.Fatal("the buffer reserved for a waiter that cancelled did not go to the next one")
	}
	nb, ok := second.Claim()
	if !ok {
		t.Fatal("the next waiter could not claim")
	}
	if p.Stats().Closed {
		t.Fatal("the slab was unmapped under a buffer it lent")
	}
	if n := len(nb.Bytes()); n != 4096 {
		t.Fatalf("the buffer lent has %d bytes, want 4096", n)
	}
	nb.Release()
	if !p.Stats().Closed {
		t.Fatal("not unmapped once every buffer came home")
	}
	for _, a := range []*Account{owner, first, second} {
		a.Leave()
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
