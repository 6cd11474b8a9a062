package driver

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type flushItem struct {
	id   int
	mark FlushMark[*flushItem]
}

// TestFlushHeapAgainstModel drives a heap with random pushes, fixes, removes
// and pops, and checks every step against a plain list.
func TestFlushHeapAgainstModel(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	base := time.Now()
	items := make([]*flushItem, 64)
	for i := range items {
		items[i] = &flushItem{id: i}
	}
	var h FlushHeap[*flushItem]
	model := map[int]time.Time{}
	for step := range 20000 {
		it := items[rnd.IntN(len(items))]
		due := base.Add(time.Duration(rnd.IntN(1000)) * time.Microsecond)
		switch op := rnd.IntN(5); {
		case op == 0 && !it.mark.In():
			h.Push(&it.mark, it, due)
			model[it.id] = due
		case op == 1 && it.mark.In():
			h.Fix(&it.mark, due)
			model[it.id] = due
		case op == 2:
			h.Remove(&it.mark)
			delete(model, it.id)
		case op == 4:
			// Set follows a deadline that may be there or not.
			ok := rnd.IntN(3) > 0
			h.Set(&it.mark, it, due, ok)
			if ok {
				model[it.id] = due
			} else {
				delete(model, it.id)
			}
		case op == 3 && h.Len() > 0:
			got, gotDue := h.Min()
			h.Remove(&got.mark)
			var dues []time.Time
			for _, d := range model {
				dues = append(dues, d)
			}
			earliest := slices.MinFunc(dues, func(a, b time.Time) int { return a.Compare(b) })
			if !gotDue.Equal(earliest) || !model[got.id].Equal(gotDue) {
				t.Fatalf("step %d: Min is item %d due %v, earliest due is %v", step, got.id, gotDue, earliest)
			}
			delete(model, got.id)
		}
		if h.Len() != len(model) {
			t.Fatalf("step %d: heap holds %d, model %d", step, h.Len(), len(model))
		}
		for _, it := range items {
			_, in := model[it.id]
			if it.mark.In() != in {
				t.Fatalf("step %d: item %d In() = %v, model %v", step, it.id, it.mark.In(), in)
			}
		}
	}
}

// BenchmarkFlushHeapPushRemove: the cost a flush deadline adds to a chunk.
func BenchmarkFlushHeapPushRemove(b *testing.B) {
	items := make([]*flushItem, 1000)
	var h FlushHeap[*flushItem]
	base := time.Now()
	for i := range items {
		items[i] = &flushItem{id: i}
		h.Push(&items[i].mark, items[i], base.Add(time.Duration(i)*time.Microsecond))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		it := items[i%len(items)]
		h.Remove(&it.mark)
		h.Push(&it.mark, it, base.Add(time.Duration(i+1000)*time.Microsecond))
		i++
	}
}

// TestPopDue: items due by now, or within their slack of it, are handed
// over earliest first and out of the heap; one its flush puts back later
// waits; the rest stay.
func TestPopDue(t *testing.T) {
	base := time.Now()
	items := make([]*flushItem, 5)
	var h FlushHeap[*flushItem]
	for i := range items {
		items[i] = &flushItem{id: i}
		h.Push(&items[i].mark, items[i], base.Add(time.Duration(i)*10*time.Millisecond))
	}
	slack := func(it *flushItem) time.Duration {
		if it.id == 3 {
			return 15 * time.Millisecond // due at 30 ms, early from 15 ms
		}
		return 0
	}
	var got []int
	h.PopDue(base.Add(15*time.Millisecond), slack, func(it *flushItem, _ time.Time) {
		if it.mark.In() {
			t.Fatalf("item %d handed over while still in the heap", it.id)
		}
		got = append(got, it.id)
		if it.id == 1 {
			h.Push(&it.mark, it, base.Add(time.Second)) // it keeps a deadline
		}
	})
	// Items 0 and 1 are due; 2 (20 ms) is not, so 3, behind it, is not
	// reached this time: the heap hands over in deadline order.
	if !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("handed over %v, want [0 1]", got)
	}
	got = got[:0]
	h.PopDue(base.Add(20*time.Millisecond), slack, func(it *flushItem, _ time.Time) { got = append(got, it.id) })
	if !slices.Equal(got, []int{2, 3}) || h.Len() != 2 {
		t.Fatalf("handed over %v (heap %d), want [2 3] and items 4 and 1 left", got, h.Len())
	}
}
