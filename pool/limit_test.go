package pool

import (
	"context"
	"testing"
	"time"
)

// TestRateLimitHolds: an account that read past its rate gets no buffer
// until it has paid for what it read, then gets one without asking again;
// an account without a limit beside it is never held; the time held is
// counted.
func TestRateLimitHolds(t *testing.T) {
	p := newPool(t, Config{BufSize: 64 << 10, Buffers: 8, MaxPerSource: 8})
	lim, free := p.Join(1), p.Join(2)
	const rate = 1 << 20 // a buffer's worth in 62.5 ms
	lim.SetRate(rate, 0) // burst: one buffer

	b, ok := lim.TryAcquire()
	if !ok {
		t.Fatal("a fresh limited account got no buffer")
	}
	lim.Charge(64 << 10) // what its burst allows
	b.Release()
	b, ok = lim.TryAcquire()
	if !ok {
		t.Fatal("an account within its burst got no buffer")
	}
	lim.Charge(64 << 10) // a buffer past it: owes 62.5 ms
	b.Release()
	if _, ok := lim.TryAcquire(); ok {
		t.Fatal("an account that owes bytes got a buffer")
	}
	for range 4 {
		fb, ok := free.TryAcquire()
		if !ok {
			t.Fatal("an account without a limit was held beside a limited one")
		}
		free.Charge(64 << 10) // no limit: counts nothing
		fb.Release()
	}

	granted := make(chan struct{}, 1)
	start := time.Now()
	if _, ok, err := lim.Wait(func() { granted <- struct{}{} }); ok || err != nil {
		t.Fatalf("Wait of an account that owes: ok %v, err %v", ok, err)
	}
	if st := p.Stats(); st.RateHeld != 1 || st.Waiters != 0 || st.Waits != 0 {
		t.Fatalf("pool stats while held (a hold is no wait for a buffer): %+v", st)
	}
	if st := lim.Stats(); !st.RateLimited || !st.Waiting {
		t.Fatalf("account stats while held: %+v", st)
	}
	select {
	case <-granted:
	case <-time.After(5 * time.Second):
		t.Fatal("the hold never ended")
	}
	if held := time.Since(start); held < 50*time.Millisecond {
		t.Errorf("held %v, want about 62.5ms", held)
	}
	b, ok = lim.Claim()
	if !ok {
		t.Fatal("no buffer to claim after the hold")
	}
	b.Release()
	st := lim.Stats()
	if st.RateHolds != 1 || st.RateHeld < 50*time.Millisecond {
		t.Errorf("account stats %+v: want one hold of about 62.5ms", st)
	}
	if fs := free.Stats(); fs.RateHolds != 0 || fs.RateHeld != 0 {
		t.Errorf("the account without a limit shows holds: %+v", fs)
	}
	if st := p.Stats(); st.RateHeld != 0 || st.Waiters != 0 || st.Waits != 0 || st.RateHolds != 1 || st.RateHeldTime < 50*time.Millisecond {
		t.Errorf("pool stats after the hold: %+v", st)
	}
	if st := lim.Stats(); st.Waits != 0 || st.RateLimited {
		t.Errorf("account stats after the hold: %+v", st)
	}
}

// TestRateLimitHoldIsNoPoolWait: a hold counts as a hold, never as a
// wait for a buffer; only when its hold ends with no buffer free does an
// account queue for one, and that wait counts.
func TestRateLimitHoldIsNoPoolWait(t *testing.T) {
	for _, tc := range []struct {
		name      string
		exhausted bool // every buffer held by another account when the hold ends
		waits     uint64
	}{
		{"a buffer free at the end of the hold", false, 0},
		{"no buffer free at the end of the hold", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, Config{BufSize: 64 << 10, Buffers: 2, MaxPerSource: 2})
			lim, other := p.Join(1), p.Join(2)
			lim.SetRate(1<<20, 0)
			lim.Charge(128 << 10) // owes a buffer's worth: 62.5 ms
			var held []*Buf
			if tc.exhausted {
				for range 2 {
					b, ok := other.TryAcquire()
					if !ok {
						t.Fatal("no buffer for the other account")
					}
					held = append(held, b)
				}
			}
			granted := make(chan struct{}, 1)
			if _, ok, err := lim.Wait(func() { granted <- struct{}{} }); ok || err != nil {
				t.Fatalf("Wait: ok %v, err %v", ok, err)
			}
			if tc.exhausted {
				// The hold ends, and the account queues for a buffer.
				deadline := time.Now().Add(5 * time.Second)
				for p.Stats().Waiters == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("the hold never ended: %+v", p.Stats())
					}
					time.Sleep(time.Millisecond)
				}
				if st := p.Stats(); st.RateHeld != 0 || st.Waits != 1 {
					t.Fatalf("queued after the hold: %+v", st)
				}
				held[0].Release()
			}
			select {
			case <-granted:
			case <-time.After(5 * time.Second):
				t.Fatal("no grant")
			}
			b, ok := lim.Claim()
			if !ok {
				t.Fatal("nothing to claim")
			}
			b.Release()
			for _, b := range held[min(1, len(held)):] {
				b.Release()
			}
			st := p.Stats()
			if st.Waits != tc.waits || st.RateHolds != 1 || st.Waiters != 0 || st.RateHeld != 0 {
				t.Errorf("pool stats: waits %d (want %d), holds %d, waiters %d, held %d", st.Waits, tc.waits, st.RateHolds, st.Waiters, st.RateHeld)
			}
			if n := st.WaitHist.Count(); n != tc.waits {
				t.Errorf("wait histogram holds %d waits, want %d", n, tc.waits)
			}
		})
	}
}

// TestRateLimitBlockingAcquire: the goroutine and thread runners' Acquire
// waits out the hold, and a cancelled Acquire leaves nothing held.
func TestRateLimitBlockingAcquire(t *testing.T) {
	p := newPool(t, Config{BufSize: 64 << 10, Buffers: 4, MaxPerSource: 4})
	a := p.Join(1)
	a.SetRate(1<<20, 0)
	a.Charge(128 << 10) // owes a buffer's worth: 62.5 ms
	start := time.Now()
	b, err := a.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if held := time.Since(start); held < 50*time.Millisecond {
		t.Errorf("Acquire returned after %v, want about 62.5ms", held)
	}
	b.Release()
	a.Charge(1 << 20) // owes a second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := a.Acquire(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Acquire while owing a second, with a 20ms deadline: %v", err)
	}
	if st := p.Stats(); st.RateHeld != 0 || st.Waiters != 0 {
		t.Errorf("a cancelled Acquire left %+v", st)
	}
	a.Leave()
}

// TestRateLimitRate: an account charged a buffer for every buffer it gets
// moves at its rate, within a buffer's worth.
func TestRateLimitRate(t *testing.T) {
	p := newPool(t, Config{BufSize: 64 << 10, Buffers: 4, MaxPerSource: 4})
	a := p.Join(1)
	const rate = 4 << 20
	a.SetRate(rate, 0)
	start := time.Now()
	var got int64
	for range 32 { // 2 MiB: half a second at the rate
		b, err := a.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		a.Charge(64 << 10)
		got += 64 << 10
		b.Release()
	}
	// The burst (a buffer) and the last buffer read ahead of the limit.
	want := time.Duration(float64(got-2*(64<<10)) / rate * float64(time.Second))
	if took := time.Since(start); took < want*95/100 {
		t.Errorf("%d bytes in %v, want no sooner than %v at %d B/s", got, took, want, rate)
	}
	a.Leave()
}
