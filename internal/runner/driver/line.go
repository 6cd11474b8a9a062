package driver

// Line is an event-loop worker's order of service, the part of its ready
// queue written once for the uring and epoll workers: first the light
// lanes (sockets that drained, to arm their polls, and those readable
// again after a read of at most LightRead), then the lanes still draining
// their sockets (DrainReads), then the ready queue, first come first
// served. A turn serves them in that order until its budget is spent;
// the rest keep their places, ahead of the lanes that joined meanwhile
// only within their own list. Each list has a spare the turn swaps in,
// so a turn allocates nothing once the lists have grown.
//
// The line holds what the worker says (a lane, or a token that finds
// one); the worker keeps a lane's queued flag and checks it before it
// adds the lane, and when it serves it, so that a lane stands in line
// once and a stale entry is skipped. A Line is owned by its worker's
// goroutine.
type Line[T any] struct {
	light, lightSpare    []T
	draining, drainSpare []T
	ready, batch         []T
}

// Light adds x to the lanes served first.
func (q *Line[T]) Light(x T) { q.light = append(q.light, x) }

// Drain adds x to the lanes draining their sockets.
func (q *Line[T]) Drain(x T) { q.draining = append(q.draining, x) }

// Ready adds x at the back of the ready queue.
func (q *Line[T]) Ready(x T) { q.ready = append(q.ready, x) }

// Len returns how many entries stand in line.
func (q *Line[T]) Len() int { return len(q.light) + len(q.draining) + len(q.ready) }

// Serve calls serve for each entry in line order, asking stop before
// each, and reports whether stop left entries for the next turn. Entries
// added meanwhile wait for the next turn.
func (q *Line[T]) Serve(stop func() bool, serve func(T)) (left bool) {
	left = serveList(&q.light, &q.lightSpare, stop, serve)
	left = serveList(&q.draining, &q.drainSpare, stop, serve) || left
	return serveList(&q.ready, &q.batch, stop, serve) || left
}

// serveList serves the entries of *list in order, with *spare swapped in
// to take those left and the ones that join meanwhile.
func serveList[T any](list, spare *[]T, stop func() bool, serve func(T)) (left bool) {
	xs := *list
	*list = (*spare)[:0]
	for i, x := range xs {
		if stop() {
			*list = append(*list, xs[i:]...)
			left = true
			break
		}
		serve(x)
	}
	clear(xs) // no stale pointers in the spare
	*spare = xs[:0]
	return left
}

// Place is where a lane stands in line after a read (Requeue).
type Place uint8

const (
	PlaceNone  Place = iota // already in line: it keeps its place
	PlaceLight              // its socket drained: arm its poll first thing next turn
	PlaceDrain              // its socket holds more: read it again first next turn
	PlaceReady              // the back of the ready queue
)

// Requeue decides where a lane whose read completed stands next, and the
// count of reads in a row it has had while its socket still held data
// (streak). A socket that drained (armPoll: a poll must tell when to read
// again) arms its poll first thing next turn: a poll brings no bytes, and
// one left behind the busy sockets' reads would leave its next arrival
// unseen for as long. One that still holds data and may be read again at
// once (drainable) is read again first, until it has had DrainReads reads
// in a row, as a goroutine reads its connection until it drains. Any
// other lane joins the back of the ready queue.
func Requeue(queued, armPoll, drainable bool, streak uint8) (Place, uint8) {
	switch {
	case queued:
		return PlaceNone, streak
	case armPoll:
		return PlaceLight, 0
	case drainable && streak < DrainReads:
		return PlaceDrain, streak + 1
	}
	return PlaceReady, 0
}

// Stand puts x where Requeue placed it.
func (q *Line[T]) Stand(x T, p Place) {
	switch p {
	case PlaceLight:
		q.Light(x)
	case PlaceDrain:
		q.Drain(x)
	case PlaceReady:
		q.Ready(x)
	}
}
