package driver

import (
	"slices"
	"testing"
)

// TestLineOrder: light lanes first, then draining, then ready, each in the
// order they joined; a stop keeps the rest in their lists for the next
// turn, and what joins during a turn waits for the next.
func TestLineOrder(t *testing.T) {
	var q Line[int]
	q.Ready(1)
	q.Drain(2)
	q.Light(3)
	q.Ready(4)
	q.Drain(5)
	q.Light(6)
	if q.Len() != 6 {
		t.Fatalf("Len = %d, want 6", q.Len())
	}
	var got []int
	never := func() bool { return false }
	left := q.Serve(never, func(x int) {
		got = append(got, x)
		if x == 2 {
			q.Drain(7) // joins during the turn: served next turn
		}
	})
	if want := []int{3, 6, 2, 5, 1, 4}; left || !slices.Equal(got, want) {
		t.Fatalf("served %v (left %v), want %v", got, left, want)
	}
	if q.Len() != 1 {
		t.Fatalf("after the turn Len = %d, want 1 (the lane that joined)", q.Len())
	}

	// A budget of three: the rest stay, in order, ahead of the next turn.
	got = got[:0]
	q.Ready(8)
	q.Ready(9)
	q.Light(10)
	n := 0
	left = q.Serve(func() bool { n++; return n > 3 }, func(x int) { got = append(got, x) })
	if want := []int{10, 7, 8}; !left || !slices.Equal(got, want) {
		t.Fatalf("budgeted turn served %v (left %v), want %v and some left", got, left, want)
	}
	got = got[:0]
	q.Light(11)
	if q.Serve(never, func(x int) { got = append(got, x) }) || !slices.Equal(got, []int{11, 9}) {
		t.Fatalf("next turn served %v, want [11 9]", got)
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d after serving all", q.Len())
	}
}

// TestLineNoAllocations: once its lists have grown, a turn allocates
// nothing.
func TestLineNoAllocations(t *testing.T) {
	var q Line[*int]
	x := new(int)
	never := func() bool { return false }
	serve := func(p *int) { q.Ready(p) } // every lane joins the next turn again
	for range 64 {
		q.Ready(x)
		q.Drain(x)
		q.Light(x)
	}
	q.Serve(never, serve)
	q.Serve(never, serve)
	if a := testing.AllocsPerRun(100, func() { q.Serve(never, serve) }); a != 0 {
		t.Fatalf("a turn allocates %v times", a)
	}
}

// TestRequeue: a lane in line keeps its place; a drained socket arms its
// poll first; one still holding data is read again first, DrainReads
// times in a row at most; anything else joins the back.
func TestRequeue(t *testing.T) {
	for _, c := range []struct {
		queued, armPoll, drainable bool
		streak                     uint8
		place                      Place
		next                       uint8
	}{
		{queued: true, armPoll: true, streak: 5, place: PlaceNone, next: 5},
		{armPoll: true, streak: 5, place: PlaceLight},
		{drainable: true, streak: 0, place: PlaceDrain, next: 1},
		{drainable: true, streak: DrainReads - 1, place: PlaceDrain, next: DrainReads},
		{drainable: true, streak: DrainReads, place: PlaceReady},
		{streak: 3, place: PlaceReady},
	} {
		p, next := Requeue(c.queued, c.armPoll, c.drainable, c.streak)
		if p != c.place || next != c.next {
			t.Errorf("Requeue(queued %v, armPoll %v, drainable %v, streak %d) = %d, %d; want %d, %d",
				c.queued, c.armPoll, c.drainable, c.streak, p, next, c.place, c.next)
		}
	}
	var q Line[int]
	q.Stand(1, PlaceReady)
	q.Stand(2, PlaceDrain)
	q.Stand(3, PlaceLight)
	q.Stand(4, PlaceNone)
	var got []int
	q.Serve(func() bool { return false }, func(x int) { got = append(got, x) })
	if !slices.Equal(got, []int{3, 2, 1}) {
		t.Fatalf("Stand then Serve: %v, want [3 2 1]", got)
	}
}
