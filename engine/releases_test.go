package engine

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/pool"
)

type observer struct {
	mu    sync.Mutex
	calls []int64
}

func (o *observer) Released(through int64) {
	o.mu.Lock()
	o.calls = append(o.calls, through)
	o.mu.Unlock()
}

// TestReleasesInOrder releases chunks in a random order and checks that
// the observer sees a monotone sequence that never claims a byte whose
// chunk, or an earlier chunk, is still held.
func TestReleasesInOrder(t *testing.T) {
	const n = 1000
	obs := &observer{}
	r := &releases{obs: obs}
	ends := make([]int64, n)
	var off int64
	for i := range ends {
		off += int64(1 + i%7)
		ends[i] = off
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	released := make([]bool, n)
	for _, i := range order {
		r.done(uint64(i), ends[i])
		released[i] = true
		obs.mu.Lock()
		if k := len(obs.calls); k > 0 {
			last := obs.calls[k-1]
			for j := range n {
				if ends[j] <= last && !released[j] {
					t.Fatalf("observer told %d bytes are released, but chunk %d (end %d) is held", last, j, ends[j])
				}
			}
		}
		obs.mu.Unlock()
	}
	for i := 1; i < len(obs.calls); i++ {
		if obs.calls[i] <= obs.calls[i-1] {
			t.Fatalf("calls went backwards: %v", obs.calls[i-1:i+1])
		}
	}
	if got := obs.calls[len(obs.calls)-1]; got != off {
		t.Fatalf("final mark %d, want %d", got, off)
	}
	if len(r.pending) != 0 {
		t.Fatalf("%d releases still pending", len(r.pending))
	}
}

// TestReleaseObserverHearsEachChunkOnce: releasing several copies of a
// chunk moves a release observer's mark once, for chunks in pool buffers
// and for those held outside the pool.
func TestReleaseObserverHearsEachChunkOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		heap bool
	}{
		{"pool buffers", false},
		{"outside the pool", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pool.New(pool.Config{BufSize: 4096, Buffers: 2, MaxPerSource: 2})
			if err != nil {
				t.Fatal(err)
			}
			a := p.Join(1)
			obs := &observer{}
			r := &releases{obs: obs}
			chunk := func(dseq uint64, end int64) Chunk {
				if tc.heap {
					return Chunk{Data: make([]byte, 10), heap: true, rel: r, dseq: dseq, end: end}
				}
				b, ok := a.TryAcquire()
				if !ok {
					t.Fatal("no buffer")
				}
				return Chunk{buf: b, lease: b.Lease(), rel: r, dseq: dseq, end: end}
			}
			first, second := chunk(0, 10), chunk(1, 20)
			firstCopy, secondCopy := first, second
			second.Release()
			secondCopy.Release()
			firstCopy.Release()
			first.Release()
			firstCopy.Release()
			if len(obs.calls) != 1 || obs.calls[0] != 20 {
				t.Fatalf("calls %v, want [20]", obs.calls)
			}
			if len(r.pending) != 0 {
				t.Fatalf("%d releases left pending", len(r.pending))
			}
			a.Leave()
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
