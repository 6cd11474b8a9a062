package front

import (
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
)

type fakeWorker struct {
	stopped bool
	load    int64
}

func (w *fakeWorker) Stopped() bool { return w.stopped }
func (w *fakeWorker) Load() int64   { return w.load }

func TestPickLeastLoadedRoundRobin(t *testing.T) {
	a, b, c := &fakeWorker{}, &fakeWorker{}, &fakeWorker{}
	ws := []*fakeWorker{a, b, c}
	var tb Table[*fakeWorker]
	// Equal loads: successive picks go round the workers.
	var got []*fakeWorker
	for range 3 {
		w, ok := tb.Pick(ws)
		if !ok {
			t.Fatal("no worker")
		}
		got = append(got, w)
	}
	if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Errorf("ties did not spread: %p %p %p", got[0], got[1], got[2])
	}
	// The least loaded wins; a stopped worker never does, however idle.
	a.load, b.load, c.load = 5, 2, 0
	c.stopped = true
	for range 3 {
		if w, _ := tb.Pick(ws); w != b {
			t.Fatalf("picked %+v, want the least loaded running worker", w)
		}
	}
	a.stopped, b.stopped = true, true
	if w, ok := tb.Pick(ws); ok {
		t.Fatalf("picked %+v with every worker stopped", w)
	}
}

func TestTableForgetKeepsAReAdd(t *testing.T) {
	var tb Table[*fakeWorker]
	w := &fakeWorker{}
	l := &contract.Lane{ID: 1}
	ws := []*fakeWorker{{}, w}
	tb.Put(l, 1, 7)
	tb.Put(l, 1, 9) // finished and added again before the first Forget
	tb.Forget(l, 7)
	if r, ok := tb.Get(l, ws); !ok || r.Tok != 9 || r.W != w {
		t.Fatalf("Get after a stale Forget = %+v, %v; want token 9", r, ok)
	}
	tb.Forget(l, 9)
	if _, ok := tb.Get(l, ws); ok || tb.Len() != 0 || l.Runner != (contract.RunnerRef{}) {
		t.Fatalf("lane still in the table (%d lanes)", tb.Len())
	}
}

func TestSlotsGenerations(t *testing.T) {
	s := Slots{Mask: 3}
	idx, gen := s.Alloc()
	if idx != 0 || gen != 1 {
		t.Fatalf("first Alloc = %d/%d, want 0/1", idx, gen)
	}
	seen := map[uint32]bool{gen: true}
	for range 6 {
		s.Free(idx)
		i, g := s.Alloc()
		if i != idx {
			t.Fatalf("freed slot %d not reused: got %d", idx, i)
		}
		if g == 0 || g > 3 {
			t.Fatalf("generation %d outside 1..3", g)
		}
		if g == gen {
			t.Fatalf("generation %d repeated at once", g)
		}
		gen = g
		seen[g] = true
	}
	if len(seen) != 3 {
		t.Errorf("generations %v, want all of 1..3 over the wrap", seen)
	}
	if i, _ := s.Alloc(); i != 1 {
		t.Errorf("second live slot = %d, want 1", i)
	}
}

// TestSlabStatesStayPut: every slot has a state of its own, which stays
// where it is as the slab grows; a slot whose slab was never made has
// none, and All yields every state of the slabs made, in slot order.
func TestSlabStatesStayPut(t *testing.T) {
	type state struct{ a, b uint64 }
	var slots Slab[state]
	if slots.Lookup(0) != nil {
		t.Fatal("an empty slab has a state")
	}
	const n = 3000 // several slabs
	seen := map[*state]bool{}
	for i := range uint32(n) {
		p := slots.Get(i)
		if seen[p] {
			t.Fatalf("slot %d shares its state with another", i)
		}
		seen[p] = true
		p.a = uint64(i) + 1
	}
	for i := range uint32(n) {
		if p := slots.Get(i); p.a != uint64(i)+1 || p != slots.Lookup(i) {
			t.Fatalf("slot %d: state moved or was overwritten (a = %d)", i, p.a)
		}
	}
	if p := slots.Lookup(1 << 20); p != nil {
		t.Fatal("a slot far past the last slab has a state")
	}
	var i uint64
	for p := range slots.All() {
		if i < n && p.a != i+1 || i >= n && p.a != 0 {
			t.Fatalf("All's state %d has a = %d", i, p.a)
		}
		i++
	}
	if i < n || i%(slabBytes/16) != 0 {
		t.Fatalf("All yielded %d states, want whole slabs of %d covering %d slots", i, slabBytes/16, n)
	}
}
