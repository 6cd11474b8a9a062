package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"zero buf size", Config{BufSize: 0, Buffers: 4}, "BufSize"},
		{"not a power of two", Config{BufSize: 5000, Buffers: 4}, "BufSize"},
		{"below a page", Config{BufSize: 2048, Buffers: 4}, "BufSize"},
		{"absurd buf size", Config{BufSize: 1 << 31, Buffers: 4}, "BufSize"},
		{"zero buffers", Config{BufSize: 4096, Buffers: 0}, "Buffers"},
		{"negative buffers", Config{BufSize: 4096, Buffers: -1}, "Buffers"},
		{"too many buffers", Config{BufSize: 4096, Buffers: MaxBuffers + 1}, "Buffers"},
		{"over the byte cap", Config{BufSize: 1 << 20, Buffers: 64, MaxBytes: 32 << 20}, "Buffers"},
		{"over the default cap", Config{BufSize: 1 << 30, Buffers: 8}, "Buffers"},
		{"negative cap", Config{BufSize: 4096, Buffers: 4, MaxBytes: -1}, "MaxBytes"},
		{"per-source cap above pool", Config{BufSize: 4096, Buffers: 4, MaxPerSource: 5}, "MaxPerSource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err == nil {
				p.Close()
				t.Fatal("New accepted a bad config")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("error %q does not name field %s", err, tc.field)
			}
			if !strings.HasPrefix(err.Error(), "pool: ") || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q should start with the package and name %s", err, tc.field)
			}
		})
	}
}

func TestDefaultsAndLayout(t *testing.T) {
	p := newPool(t, Config{BufSize: 8192, Buffers: 16})
	if got := p.Config().MaxPerSource; got != 4 {
		t.Fatalf("default MaxPerSource = %d, want Buffers/4 = 4", got)
	}
	iovs := p.Iovecs()
	if len(iovs) != 16 {
		t.Fatalf("%d iovecs, want 16", len(iovs))
	}
	a := p.Join(1)
	defer a.Leave()
	var got []*Buf
	for range 4 {
		b, ok := a.TryAcquire()
		if !ok {
			t.Fatal("uncontended TryAcquire failed")
		}
		got = append(got, b)
	}
	for _, b := range got {
		if len(b.Bytes()) != 8192 {
			t.Fatalf("buffer %d has %d bytes", b.Index(), len(b.Bytes()))
		}
		// The index is the slot: the iovec of that index is this buffer.
		if &b.Bytes()[0] != iovs[b.Index()].Base {
			t.Fatalf("buffer %d is not at iovec %d", b.Index(), b.Index())
		}
		b.Release()
	}
}

func TestPerSourceCapWithoutContention(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 8, MaxPerSource: 3})
	a := p.Join(1)
	defer a.Leave()
	var held []*Buf
	for {
		b, ok := a.TryAcquire()
		if !ok {
			break
		}
		held = append(held, b)
	}
	if len(held) != 3 {
		t.Fatalf("source got %d buffers, cap is 3", len(held))
	}
	if st := p.Stats(); st.Free != 5 || st.InUse != 3 {
		t.Fatalf("stats %+v, want 5 free and 3 in use", st)
	}
	for _, b := range held {
		b.Release()
	}
}

// recorder collects grant notifications in order. Notify runs on the
// releasing goroutine, so a single-goroutine test sees them synchronously.
type recorder struct {
	mu    sync.Mutex
	order []*Account
}

func (r *recorder) notifier(a *Account) func() {
	return func() {
		r.mu.Lock()
		r.order = append(r.order, a)
		r.mu.Unlock()
	}
}

func (r *recorder) take() []*Account {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.order
	r.order = nil
	return o
}

func TestFIFOUnderContention(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 1})
	owner := p.Join(0)
	b, ok := owner.TryAcquire()
	if !ok {
		t.Fatal("first acquire failed")
	}
	var rec recorder
	var waiters []*Account
	for i := range 10 {
		a := p.Join(SourceID(i + 1))
		if _, ok, err := a.Wait(rec.notifier(a)); ok || err != nil {
			t.Fatalf("waiter %d: ok=%v err=%v with the pool empty", i, ok, err)
		}
		waiters = append(waiters, a)
	}
	if st := p.Stats(); st.Waiters != 10 {
		t.Fatalf("%d waiters, want 10", st.Waiters)
	}
	b.Release()
	for i, want := range waiters {
		got := rec.take()
		if len(got) != 1 || got[0] != want {
			t.Fatalf("release %d went to %v, want source %d", i, got, want.ID())
		}
		nb, ok := want.Claim()
		if !ok {
			t.Fatalf("source %d was notified but cannot claim", want.ID())
		}
		nb.Release()
	}
	owner.Leave()
	for _, a := range waiters {
		a.Leave()
	}
	if st := p.Stats(); st.InUse != 0 || st.Waiters != 0 || st.Waits != 10 {
		t.Fatalf("stats after FIFO run: %+v", st)
	}
}

// TestHogCannotStarveOthers drives one source that re-acquires in a tight
// loop against 1,000 sources that each want a buffer, and checks that every
// source is served once per round: the gap between two grants to the same
// source never exceeds the number of contenders.
func TestHogCannotStarveOthers(t *testing.T) {
	const others, rounds = 1000, 5
	p := newPool(t, Config{BufSize: 4096, Buffers: 8, MaxPerSource: 4})
	var rec recorder
	hog := p.Join(0)
	var hogBufs []*Buf
	for {
		b, ok := hog.TryAcquire()
		if !ok {
			break
		}
		hogBufs = append(hogBufs, b)
	}
	filler := p.Join(1)
	var fillBufs []*Buf
	for range 4 {
		b, _ := filler.TryAcquire()
		fillBufs = append(fillBufs, b)
	}
	accts := make([]*Account, others)
	lastGrant := make(map[*Account]int)
	grants := make(map[*Account]int)
	for i := range accts {
		accts[i] = p.Join(SourceID(i + 2))
		if _, ok, _ := accts[i].Wait(rec.notifier(accts[i])); ok {
			t.Fatal("a waiter was served from an empty pool")
		}
		lastGrant[accts[i]] = 0
	}
	hogTry := func() {
		// The hog spins: everything it can get, it takes at once.
		for {
			b, ok := hog.TryAcquire()
			if !ok {
				break
			}
			grants[hog]++
			hogBufs = append(hogBufs, b)
		}
		hog.Wait(rec.notifier(hog))
	}
	hogTry()
	var pending []*Buf // granted buffers, consumed one per step
	pending = append(pending, fillBufs...)
	pending = append(pending, hogBufs...)
	hogBufs = nil
	filler.Leave()
	step := 0
	for step < others*rounds {
		if len(pending) == 0 {
			t.Fatalf("step %d: nothing in flight, the pool stalled", step)
		}
		b := pending[0]
		pending = pending[1:]
		b.Release()
		hogTry()
		for _, a := range rec.take() {
			nb, ok := a.Claim()
			if !ok {
				continue
			}
			step++
			if a == hog {
				grants[hog]++
				pending = append(pending, nb)
				continue
			}
			if gap := step - lastGrant[a]; gap > others+1 {
				t.Fatalf("source %d waited %d grants, more than one round of %d", a.ID(), gap, others+1)
			}
			lastGrant[a] = step
			grants[a]++
			pending = append(pending, nb)
			a.Wait(rec.notifier(a)) // it wants another at once
		}
		pending = append(pending, hogBufs...)
		hogBufs = nil
	}
	for _, a := range accts {
		if grants[a] < rounds-1 {
			t.Fatalf("source %d got %d grants in %d rounds", a.ID(), grants[a], rounds)
		}
	}
	if grants[hog] > rounds+1 {
		t.Fatalf("the hog got %d grants in %d rounds of %d sources", grants[hog], rounds, others)
	}
	t.Logf("hog grants %d; each of %d others got at least %d", grants[hog], others, rounds-1)
	for _, b := range pending {
		b.Release()
	}
	hog.Leave()
	for _, a := range accts {
		a.Leave()
	}
	for _, b := range hogBufs {
		b.Release()
	}
}

func TestCancelAndLeaveLoseNothing(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 2, MaxPerSource: 2})
	owner := p.Join(0)
	b1, _ := owner.TryAcquire()
	b2, _ := owner.TryAcquire()

	// A blocking acquire that is cancelled leaves no waiter.
	ctx, cancel := context.WithCancel(context.Background())
	blocked := p.Join(1)
	done := make(chan error)
	go func() {
		_, err := blocked.Acquire(ctx)
		done <- err
	}()
	waitFor(t, func() bool { return p.Stats().Waiters == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire returned %v", err)
	}
	if w := p.Stats().Waiters; w != 0 {
		t.Fatalf("%d waiters after cancel", w)
	}

	// A source that leaves after a buffer was reserved for it passes the
	// buffer on to the next waiter.
	var rec recorder
	first, second := p.Join(2), p.Join(3)
	first.Wait(rec.notifier(first))
	second.Wait(rec.notifier(second))
	b1.Release()
	if got := rec.take(); len(got) != 1 || got[0] != first {
		t.Fatal("the released buffer did not go to the first waiter")
	}
	first.Leave()
	if got := rec.take(); len(got) != 1 || got[0] != second {
		t.Fatal("the buffer reserved for a leaver did not go to the next waiter")
	}
	if _, ok := first.Claim(); ok {
		t.Fatal("a source that left could still claim")
	}
	nb, ok := second.Claim()
	if !ok {
		t.Fatal("the next waiter could not claim")
	}

	// Cancelling a granted wait returns the buffer too.
	third := p.Join(4)
	third.Wait(rec.notifier(third))
	nb.Release()
	if got := rec.take(); len(got) != 1 || got[0] != third {
		t.Fatal("release did not go to the third waiter")
	}
	third.Cancel()
	b2.Release()
	if st := p.Stats(); st.InUse != 0 || st.Free != 2 || st.Waiters != 0 {
		t.Fatalf("after cancel and leave: %+v", st)
	}
	if _, ok, err := first.Wait(func() {}); ok || !errors.Is(err, ErrLeft) {
		t.Fatalf("Wait after Leave: ok=%v err=%v", ok, err)
	}
	for _, a := range []*Account{owner, blocked, second, third} {
		a.Leave()
	}
	if st := p.Stats(); st.Accounts != 0 {
		t.Fatalf("%d accounts remain", st.Accounts)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMisuseFailsLoudly(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 2})
	other := newPool(t, Config{BufSize: 4096, Buffers: 2})
	a := p.Join(1)
	defer a.Leave()
	b, _ := a.TryAcquire()
	copy(b.Bytes(), "hello")
	b.Release()
	if invariants {
		for i, c := range p.bufs[b.Index()].data[:8] {
			if c != 0xdb {
				t.Fatalf("byte %d of a released buffer is %#x, want poison 0xdb", i, c)
			}
		}
	}
	for _, tc := range []struct {
		name, want string
		fn         func()
	}{
		{"double release", "double release", func() { b.Release() }},
		{"use after release", "after release", func() { _ = b.Bytes() }},
		{"foreign release", "another pool", func() { other.Release(b) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Fatalf("recovered %v, want a panic mentioning %q", r, tc.want)
				}
			}()
			tc.fn()
		})
	}
}

func TestCloseRefusesWhileHeld(t *testing.T) {
	p, err := New(Config{BufSize: 4096, Buffers: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Join(1)
	b, _ := a.TryAcquire()
	if err := p.Close(); !errors.Is(err, ErrOutstanding) {
		t.Fatalf("Close with a buffer out: %v", err)
	}
	b.Release()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, ok := a.TryAcquire(); ok {
		t.Fatal("acquired from a closed pool")
	}
	if _, err := a.Acquire(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire on a closed pool: %v", err)
	}
}

// TestStressEveryBufferComesHome runs many sources through every acquire
// form at once, stamps each buffer while holding it to catch two owners of
// one buffer, and checks the books balance at the end. The policy hook
// checks, at every grant, that no source gets a second buffer while a
// source with none waits.
func TestStressEveryBufferComesHome(t *testing.T) {
	const sources, iters = 64, 2000
	p := newPool(t, Config{BufSize: 4096, Buffers: 16, MaxPerSource: 3})
	var violations atomic.Int64
	p.onGrant = func(a *Account) {
		if a.held >= 2 && p.hungry.n > 0 {
			violations.Add(1)
		}
	}
	var wg sync.WaitGroup
	for s := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(s), 7))
			a := p.Join(SourceID(s))
			defer func() { a.Leave() }()
			var held []*Buf
			stamp := func(b *Buf) {
				buf := b.Bytes()
				buf[0], buf[1] = byte(s), byte(s>>8)
				held = append(held, b)
			}
			for range iters {
				switch r.IntN(6) {
				case 0:
					if b, ok := a.TryAcquire(); ok {
						stamp(b)
					}
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(200))*time.Microsecond)
					if b, err := a.Acquire(ctx); err == nil {
						stamp(b)
					}
					cancel()
				case 2:
					ready := make(chan struct{}, 1)
					b, ok, err := a.Wait(func() { ready <- struct{}{} })
					if err != nil {
						t.Error(err)
						return
					}
					if !ok {
						select {
						case <-ready:
							b, ok = a.Claim()
						case <-time.After(time.Duration(r.IntN(300)) * time.Microsecond):
							a.Cancel()
						}
					}
					if ok {
						stamp(b)
					}
				case 3:
					a.Leave()
					a = p.Join(SourceID(s))
				default:
					if len(held) > 0 {
						i := r.IntN(len(held))
						b := held[i]
						if buf := b.Bytes(); buf[0] != byte(s) || buf[1] != byte(s>>8) {
							t.Errorf("source %d found buffer %d stamped by %d", s, b.Index(), int(buf[0])|int(buf[1])<<8)
						}
						held = append(held[:i], held[i+1:]...)
						b.Release()
					}
				}
			}
			for _, b := range held {
				b.Release()
			}
		}()
	}
	wg.Wait()
	st := p.Stats()
	if st.InUse != 0 || st.Free != 16 || st.Waiters != 0 || st.Accounts != 0 || st.Acquired != st.Released {
		t.Fatalf("books do not balance: %+v", st)
	}
	if n := violations.Load(); n > 0 {
		t.Fatalf("%d grants gave a source a second buffer while an empty-handed source waited", n)
	}
	t.Logf("acquired %d, waited %d times, p99 wait <= %v", st.Acquired, st.Waits, st.WaitHist.Quantile(0.99))
}

// TestFairnessJain runs 1,000 sources that each acquire, hold briefly and
// release in a loop against 64 buffers, until a shared budget of grants is
// spent, and checks Jain's index over grants per source.
func TestFairnessJain(t *testing.T) {
	const sources, bufs, budget = 1000, 64, 40000
	p := newPool(t, Config{BufSize: 4096, Buffers: bufs, MaxPerSource: 4})
	counts := make([]int64, sources)
	var spent atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every source joins, then all start together: a source that has not
	// started yet cannot be served, and would spoil the measure.
	var joined sync.WaitGroup
	start := make(chan struct{})
	for s := range sources {
		wg.Add(1)
		joined.Add(1)
		go func() {
			defer wg.Done()
			a := p.Join(SourceID(s))
			defer a.Leave()
			joined.Done()
			<-start
			for {
				b, err := a.Acquire(ctx)
				if err != nil {
					return
				}
				if spent.Add(1) > budget {
					b.Release()
					cancel()
					return
				}
				counts[s]++
				b.Bytes()[0] = byte(s)
				// Model processing time, so that the pool is the bottleneck
				// and every source is queued in it; otherwise free buffers go
				// to whichever goroutines the scheduler happens to run.
				time.Sleep(100 * time.Microsecond)
				b.Release()
			}
		}()
	}
	joined.Wait()
	close(start)
	wg.Wait()
	var sum, sumSq float64
	for _, c := range counts {
		sum += float64(c)
		sumSq += float64(c) * float64(c)
	}
	jain := sum * sum / (float64(sources) * sumSq)
	t.Logf("Jain's index over grants per source: %.4f (%d sources, %d buffers, %.0f grants)", jain, sources, bufs, sum)
	if jain < 0.99 {
		t.Fatalf("Jain's index %.4f < 0.99", jain)
	}
	if st := p.Stats(); st.InUse != 0 || st.Waiters != 0 {
		t.Fatalf("after fairness run: %+v", st)
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty histogram has a quantile")
	}
	for range 99 {
		h.record(1000) // bucket [512, 1024)
	}
	h.record(time.Second)
	if q := h.Quantile(0.5); q != 1024 {
		t.Fatalf("p50 = %v, want 1.024µs", q)
	}
	if q := h.Quantile(1); q < time.Second || q > 2*time.Second {
		t.Fatalf("max = %v, want within [1s, 2s]", q)
	}
}

func TestUncontendedPathDoesNotAllocate(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 4})
	a := p.Join(1)
	defer a.Leave()
	allocs := testing.AllocsPerRun(1000, func() {
		b, ok := a.TryAcquire()
		if !ok {
			panic("acquire failed")
		}
		b.Release()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per acquire and release", allocs)
	}
}

func TestWaitIdle(t *testing.T) {
	p := newPool(t, Config{BufSize: 4096, Buffers: 2})
	a := p.Join(1)
	defer a.Leave()
	if err := p.WaitIdle(context.Background()); err != nil {
		t.Fatalf("idle pool: %v", err)
	}
	b, _ := a.TryAcquire()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := p.WaitIdle(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle with a buffer out: %v", err)
	}
	done := make(chan error)
	go func() { done <- p.WaitIdle(context.Background()) }()
	b.Release()
	if err := <-done; err != nil {
		t.Fatalf("WaitIdle after the last release: %v", err)
	}
}

// TestJoinAllocatesOnlyTheAccount: an account's means of blocking is made
// only by a blocking Acquire, so the many idle sources of an event-loop
// runner cost one small allocation each.
func TestJoinAllocatesOnlyTheAccount(t *testing.T) {
	p, err := New(Config{BufSize: 4096, Buffers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n := testing.AllocsPerRun(100, func() { p.Join(1).Leave() }); n > 1 {
		t.Errorf("Join allocated %v times, want 1", n)
	}
	a := p.Join(2)
	defer a.Leave()
	b, err := a.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
}

// TestAccountSize holds an account to its size class: an engine keeps one
// per connection, most of them idle and never waiting; what waits and
// rate limits use lives in accountWait, made on first use.
func TestAccountSize(t *testing.T) {
	if n := reflect.TypeFor[Account]().Size(); n > 64 {
		t.Errorf("an Account is %d bytes, more than 64", n)
	}
}
