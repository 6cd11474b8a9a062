package uring

import "testing"

// TestOpSet checks that a set holds what was added to it and nothing else,
// across the words of its bitset.
func TestOpSet(t *testing.T) {
	in := []Op{OpNop, OpRead, 63, 64, 127, 128, 255}
	var s OpSet
	for _, op := range in {
		s.Add(op)
	}
	want := map[Op]bool{}
	for _, op := range in {
		want[op] = true
	}
	for op := range 256 {
		if got := s.Has(Op(op)); got != want[Op(op)] {
			t.Errorf("Has(%d) = %v, want %v", op, got, want[Op(op)])
		}
	}
	if (OpSet{}).Has(OpNop) {
		t.Error("the empty set has OpNop")
	}
}
