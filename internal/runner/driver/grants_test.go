package driver

import (
	"testing"

	"github.com/sluice-io/sluice/pool"
)

// TestGrants walks a lane through the pool's asynchronous acquire: it
// waits when the pool is empty, its grant is posted with its token when a
// buffer frees, Collect takes the buffer, a spurious grant leaves the lane
// waiting, a grant during a pause goes back to the pool for the next
// waiter, and a slot's notification is made once per generation.
func TestGrants(t *testing.T) {
	p, err := pool.New(pool.Config{BufSize: 4096, Buffers: 1, MaxPerSource: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var posted []uint64
	g := Grants{Post: func(tok uint64) { posted = append(posted, tok) }}
	busy, lane := p.Join(1), p.Join(2)
	defer busy.Leave()
	defer lane.Leave()
	tok := Token(3, 7)
	if idx, gen := SplitToken(tok); idx != 3 || gen != 7 {
		t.Fatalf("SplitToken(Token(3, 7)) = %d, %d", idx, gen)
	}

	held, wait, err := g.Acquire(busy, Token(1, 1))
	if err != nil || wait || held == nil {
		t.Fatalf("Acquire from a free pool: %v, wait %v, %v", held, wait, err)
	}
	if b, wait, err := g.Acquire(lane, tok); err != nil || !wait || b != nil {
		t.Fatalf("Acquire from an empty pool: %v, wait %v, %v; want a wait", b, wait, err)
	}
	if b, wait, err := g.Collect(lane, tok, false); err != nil || !wait || b != nil {
		t.Fatalf("Collect before any grant: %v, wait %v, %v; want a wait", b, wait, err)
	}
	held.Release()
	if len(posted) != 1 || posted[0] != tok {
		t.Fatalf("posted %v, want one grant for %#x", posted, tok)
	}
	b, wait, err := g.Collect(lane, tok, false)
	if err != nil || wait || b == nil {
		t.Fatalf("Collect after the grant: %v, wait %v, %v", b, wait, err)
	}

	// Paused: the grant's buffer goes back at once, to the next waiter.
	if _, wait, _ := g.Acquire(busy, Token(1, 1)); !wait {
		t.Fatal("a second account got a buffer from a pool of one")
	}
	b.Release()
	if b, wait, err := g.Collect(busy, Token(1, 1), true); err != nil || wait || b != nil {
		t.Fatalf("Collect giving back: %v, wait %v, %v; want nothing held", b, wait, err)
	}
	if st := p.Stats(); st.InUse != 0 {
		t.Fatalf("after a give-back the pool has %d buffers in use", st.InUse)
	}

	// One notification per slot and generation.
	f1 := g.For(tok)
	if a := testing.AllocsPerRun(10, func() { g.For(tok) }); a != 0 {
		t.Fatalf("For made a new notification for the same lane (%v allocations)", a)
	}
	posted = posted[:0]
	g.For(Token(3, 8))()
	f1()
	if len(posted) != 2 || posted[0] != Token(3, 8) || posted[1] != tok {
		t.Fatalf("posted %v, want the new generation's token, then the old one's", posted)
	}
}
