package engine

import (
	"math/bits"

	"github.com/sluice-io/sluice/srcs"
)

// sourceSet holds the engine's live sources by id: an open-addressed
// table of pointers (linear probing, deletion by backward shift), 8 bytes
// a slot at a load of 3/8 to 3/4, where a map[srcs.ID]*source spent about
// 35 bytes a source. A node keeps one entry per connection, most of them
// idle. The zero value is empty. Not safe for concurrent use.
type sourceSet struct {
	slots []*source // a power of two long, or empty
	shift uint8     // 64 - log2(len(slots)): home keeps the hash's top bits
	n     int
}

// Table bounds: the table doubles above 3/4 full and halves below 1/8
// (never below minSourceSlots), so its load stays between 3/8 and 3/4.
const minSourceSlots = 16

// home is the slot where a probe for id starts: Fibonacci hashing, which
// spreads the engine's consecutive ids evenly.
func (t *sourceSet) home(id srcs.ID) int {
	return int(uint64(id) * 0x9e3779b97f4a7c15 >> t.shift)
}

// len returns the number of sources held.
func (t *sourceSet) len() int { return t.n }

// add adds s, whose id must not be held already.
func (t *sourceSet) add(s *source) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(minSourceSlots, 2*len(t.slots)))
	}
	t.put(s)
	t.n++
}

func (t *sourceSet) put(s *source) {
	mask := len(t.slots) - 1
	i := t.home(s.id())
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// get returns the source with id, or nil.
func (t *sourceSet) get(id srcs.ID) *source {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(id); t.slots[i] != nil; i = (i + 1) & mask {
		if t.slots[i].id() == id {
			return t.slots[i]
		}
	}
	return nil
}

// remove removes the source with id, if held.
func (t *sourceSet) remove(id srcs.ID) {
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.home(id)
	for ; t.slots[i] == nil || t.slots[i].id() != id; i = (i + 1) & mask {
		if t.slots[i] == nil {
			return
		}
	}
	// Shift back each later entry of the run that may move into the hole:
	// one whose home is not cyclically within (i, j].
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		if h := t.home(t.slots[j].id()); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = nil
	t.n--
	if len(t.slots) > minSourceSlots && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

// resize rehashes the table into n slots, a power of two.
func (t *sourceSet) resize(n int) {
	old := t.slots
	t.slots = make([]*source, n)
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	for _, s := range old {
		if s != nil {
			t.put(s)
		}
	}
}

// each calls f for every source held, in no particular order; f must not
// add or remove sources.
func (t *sourceSet) each(f func(*source)) {
	for _, s := range t.slots {
		if s != nil {
			f(s)
		}
	}
}
