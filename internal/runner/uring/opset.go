package uring

// OpSet is a set of opcodes, such as those a kernel supports. The zero
// value is empty.
type OpSet struct{ bits [4]uint64 }

// Has reports whether op is in the set.
func (s OpSet) Has(op Op) bool { return s.bits[op/64]&(1<<(op%64)) != 0 }

// Add puts op in the set.
func (s *OpSet) Add(op Op) { s.bits[op/64] |= 1 << (op % 64) }
