package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// TestSourceSet drives a sourceSet and a map side by side through random
// adds, lookups and removals, with ids consecutive as the engine makes
// them and the table growing and shrinking on the way: both must always
// hold the same sources.
func TestSourceSet(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		var set sourceSet
		ref := map[srcs.ID]*source{}
		var held []srcs.ID
		next := srcs.ID(1)
		for step := range 20000 {
			switch op := r.IntN(10); {
			case op < 5 || len(held) == 0:
				s := &source{lane: contract.Lane{ID: next}}
				next++
				set.add(s)
				ref[s.id()] = s
				held = append(held, s.id())
			case op < 8:
				k := r.IntN(len(held))
				id := held[k]
				held[k] = held[len(held)-1]
				held = held[:len(held)-1]
				set.remove(id)
				delete(ref, id)
			default:
				id := srcs.ID(r.IntN(int(next) + 5))
				if got, want := set.get(id), ref[id]; got != want {
					t.Fatalf("seed %d step %d: get(%d) = %p, want %p", seed, step, id, got, want)
				}
			}
			if set.len() != len(ref) {
				t.Fatalf("seed %d step %d: len %d, want %d", seed, step, set.len(), len(ref))
			}
		}
		// Empty it, checking every lookup on the way down: the table
		// shrinks as it empties.
		for i, id := range held {
			if set.get(id) != ref[id] {
				t.Fatalf("seed %d: lost %d", seed, id)
			}
			set.remove(id)
			set.remove(id) // a second removal finds nothing
			for _, other := range held[i+1 : min(len(held), i+4)] {
				if set.get(other) == nil {
					t.Fatalf("seed %d: removing %d lost %d", seed, id, other)
				}
			}
		}
		if set.len() != 0 || len(set.slots) != minSourceSlots {
			t.Fatalf("seed %d: emptied: len %d, %d slots", seed, set.len(), len(set.slots))
		}
		n := 0
		set.each(func(*source) { n++ })
		if n != 0 {
			t.Fatalf("seed %d: each visits %d sources of an empty set", seed, n)
		}
	}
}

// TestSourceSetEach checks that each visits every source once.
func TestSourceSetEach(t *testing.T) {
	var set sourceSet
	for id := srcs.ID(1); id <= 1000; id++ {
		set.add(&source{lane: contract.Lane{ID: id}})
	}
	for id := srcs.ID(1); id <= 1000; id += 3 {
		set.remove(id)
	}
	seen := map[srcs.ID]int{}
	set.each(func(s *source) { seen[s.id()]++ })
	for id := srcs.ID(1); id <= 1000; id++ {
		if want := int(min(1, (id-1)%3)); seen[id] != want {
			t.Fatalf("source %d seen %d times, want %d", id, seen[id], want)
		}
	}
}
