package driver

import "github.com/sluice-io/sluice/pool"

// Token names one incarnation of an event-loop worker's lane: its slot
// index and the slot's generation, which tells a lane from the earlier
// ones in the same slot.
func Token(idx, gen uint32) uint64 { return uint64(idx)<<32 | uint64(gen) }

// SplitToken returns a token's slot index and generation.
func SplitToken(tok uint64) (idx, gen uint32) { return uint32(tok >> 32), uint32(tok) }

// Grants keeps an event-loop worker's pool grant notifications by lane
// slot: the function a pool Wait calls once it has reserved a buffer for
// the lane, which posts a grant naming the lane's token to the worker.
// One is made on a slot's first pool wait and kept for the slot's
// generation: most lanes never wait, and an idle lane should not keep a
// closure of its own. Grants are owned by the worker's goroutine.
type Grants struct {
	// Post posts a grant for the lane tok names to the worker; it may run
	// on any goroutine (a releasing consumer's).
	Post  func(tok uint64)
	slots []grant
}

type grant struct {
	gen uint32
	f   func()
}

// For returns the grant notification of the lane tok names.
func (g *Grants) For(tok uint64) func() {
	idx, gen := SplitToken(tok)
	for int(idx) >= len(g.slots) {
		g.slots = append(g.slots, grant{})
	}
	n := &g.slots[idx]
	if n.f == nil || n.gen != gen {
		post := g.Post
		n.gen, n.f = gen, func() { post(tok) }
	}
	return n.f
}

// Acquire takes a buffer from a for the lane tok names: at once if the
// pool's policy allows, else the lane waits for a grant (For) and wait is
// true. An error ends the lane.
func (g *Grants) Acquire(a *pool.Account, tok uint64) (b *pool.Buf, wait bool, err error) {
	if b, ok := a.TryAcquire(); ok {
		return b, false, nil
	}
	b, ok, err := a.Wait(g.For(tok))
	return b, !ok && err == nil, err
}

// Collect takes the buffer a grant reserved for the waiting lane tok
// names. A grant may be spurious: the pool decides (Claim), and a lane
// left without a buffer waits again (wait is true). With giveBack (a
// pause, which the lane must not read through, and no cut, which needs
// the buffer to move its incomplete record) the buffer goes back to the
// pool at once, to serve the next waiter: the lane acquires again when
// it may read, and b is nil. An error ends the lane.
func (g *Grants) Collect(a *pool.Account, tok uint64, giveBack bool) (b *pool.Buf, wait bool, err error) {
	b, ok := a.Claim()
	if !ok {
		if b, ok, err = a.Wait(g.For(tok)); err != nil || !ok {
			return nil, err == nil, err
		}
	}
	if giveBack {
		b.Release()
		return nil, false, nil
	}
	return b, false, nil
}
