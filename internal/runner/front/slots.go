package front

// Slots hands out a worker's slot indices, each with a generation that
// changes every time the slot is taken, so that a token (slot and
// generation) names one lane's incarnation and a late command or
// completion for an earlier one finds nothing. Generation zero never
// occurs: workers use it to mark a free slot. It is not safe for
// concurrent use: workers guard it with their command mutex, so that any
// goroutine may allocate and free.
type Slots struct {
	// Mask bounds generations (they wrap within it); zero means 32 bits.
	Mask uint32
	gens []uint32 // generation of each slot, bumped on allocation
	free []uint32 // free slot indices, reused last in first out
}

// Alloc reserves a slot and returns it with its new generation.
func (s *Slots) Alloc() (idx, gen uint32) {
	if n := len(s.free); n > 0 {
		idx = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		idx = uint32(len(s.gens))
		s.gens = append(s.gens, 0)
	}
	gen = s.gens[idx] + 1
	if s.Mask != 0 {
		gen &= s.Mask
	}
	if gen == 0 {
		gen = 1
	}
	s.gens[idx] = gen
	return idx, gen
}

// Free returns a slot for reuse.
func (s *Slots) Free(idx uint32) { s.free = append(s.free, idx) }
