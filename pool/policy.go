package pool

// The policy core: who gets the next buffer. doc.go states the policy;
// this is the bookkeeping that carries it out, apart from the locking, the
// clock and the buffers' memory.

// policy decides which account gets each buffer: a free buffer goes to
// whoever asks first, up to the per-source cap; once none is free, waiters
// with empty hands queue FIFO (hungry) and each buffer that comes home
// goes to the head of that queue; waiters that hold some buffers queue in
// a second FIFO (greedy) served only while no hungry one waits; a waiter
// at the cap waits outside both (parked) until one of its own buffers
// comes home; and an account its rate limit holds waits outside both
// until the hold ends, then takes a free buffer at once if one is free and
// it is under the cap, and otherwise queues like any waiter.
//
// A hold is no wait for a buffer: the policy says when a wait for one
// begins (wait, unhold), so that the pool counts waits, and times them to
// their grant, for contention alone, and it counts the accounts queued for
// a buffer (waiters) apart from those their rate limit holds (rateHeld).
// Every grant to a waiter (release, cancel) ends a wait that began so; a
// grant that ends a hold (unhold) ends none.
//
// It keeps the free buffers' indices and each account's place, and every
// transition of either happens here, so that one invariant holds after
// every call: while a buffer is free, no queued account waits (a waiter
// that could be served has been). At most one buffer comes home, or one
// waiter becomes eligible, per call, so each call grants at most one
// buffer, and returns it.
//
// policy reads no clock and does no I/O: what a rate limit says is an
// argument (owes). It is not safe for concurrent use; the Pool calls it
// with its mutex held, and carries out its grants (the buffer's lease,
// the wait's statistics, the notify).
type policy struct {
	cap      int32    // the most buffers one account may hold: Config.MaxPerSource
	free     []int32  // indices of free buffers, used as a stack
	hungry   waitList // waiting accounts that hold no buffer
	greedy   waitList // waiting accounts that hold some, but fewer than the cap
	parked   int      // waiting accounts at the cap, in no list
	rateHeld int      // waiting accounts held by their rate limit, in no list
}

// newPolicy starts a policy over buffers free buffers, low indices handed
// out first.
func newPolicy(buffers, perSource int) policy {
	q := policy{cap: int32(perSource), free: make([]int32, buffers)}
	for i := range q.free {
		q.free[i] = int32(buffers - 1 - i)
	}
	q.hungry.id, q.greedy.id = inHungry, inGreedy
	return q
}

// An account's part of the policy's state is in the Account: held, state,
// in, prev and next, which only the policy changes.

type waitState uint8

const (
	idle    waitState = iota
	waiting           // queued, parked or held by its rate limit
	granted           // a buffer is reserved for it, until it claims it
)

// listID names where a waiting account waits.
type listID uint8

const (
	inNone listID = iota // parked at the cap (or not waiting)
	inHungry
	inGreedy
	inRate // held by its rate limit, in no list
)

// waiters counts the accounts that wait for a buffer, queued or at the
// cap; those their rate limit holds wait for their limit, and are counted
// in rateHeld instead.
func (q *policy) waiters() int { return q.hungry.n + q.greedy.n + q.parked }

// try lends a a free buffer now, if the policy allows: a does not wait
// already, holds fewer than the cap and owes its rate limit nothing, and a
// buffer is free. It returns the buffer's index. Free buffers mean that
// nobody eligible waits, so first come, first served is fair here.
func (q *policy) try(a *Account, owes bool) (int32, bool) {
	if a.state != idle || len(q.free) == 0 || a.held >= q.cap || owes {
		return 0, false
	}
	return q.take(a), true
}

// wait makes a, which try refused, a waiter: held by its rate limit while
// it owes, parked while it holds the cap, and otherwise at the tail of the
// list its holdings put it in. It says whether a wait for a buffer began:
// not for a hold, nor for an account that already waits or has a buffer
// reserved, which stays as it is.
func (q *policy) wait(a *Account, owes bool) (queued bool) {
	if a.state != idle {
		return false
	}
	a.state = waiting
	if owes {
		a.in = inRate
		q.rateHeld++
		return false
	}
	q.enqueue(a)
	return true
}

// claim hands a the buffer reserved for it, if there is one: it is then
// a's like any other it holds.
func (q *policy) claim(a *Account) bool {
	if a.state != granted {
		return false
	}
	a.state = idle
	return true
}

// release takes buffer idx home from a and hands it on. A waiting a whose
// holdings dropped moves to the list they now put it in first, so that a
// waiter at the cap, or one left with empty hands, is served in its turn.
// It returns the account granted a buffer, and the buffer, or nil.
func (q *policy) release(a *Account, idx int32) (*Account, int32) {
	a.held--
	if a.state == waiting {
		q.requeue(a)
	}
	q.free = append(q.free, idx)
	return q.dispatch()
}

// cancel withdraws a's wait, or its reservation: reserved is the index of
// the buffer reserved for it, which goes home and on to the next waiter.
// It returns the account granted a buffer, and the buffer, or nil.
func (q *policy) cancel(a *Account, reserved int32) (*Account, int32) {
	switch a.state {
	case idle:
		return nil, 0
	case waiting:
		switch a.in {
		case inHungry:
			q.hungry.remove(a)
		case inGreedy:
			q.greedy.remove(a)
		case inRate:
			a.in = inNone
			q.rateHeld--
		default:
			q.parked--
		}
	case granted:
		a.held--
		q.free = append(q.free, reserved)
	}
	a.state = idle
	return q.dispatch()
}

// unhold ends the rate hold of a waiting account. With a buffer free and
// a under the cap, a is granted one at once, as try would have lent it
// one had it owed nothing: free buffers mean that nobody eligible queues,
// so a passes nobody, and no wait for a buffer began. Otherwise a queues
// like any waiter (queued): with no buffer free, or at the cap, where no
// dispatch could serve it. It returns the buffer reserved for a, if lent.
func (q *policy) unhold(a *Account) (idx int32, lent, queued bool) {
	if a.state != waiting || a.in != inRate {
		return 0, false, false
	}
	a.in = inNone
	q.rateHeld--
	if len(q.free) > 0 && a.held < q.cap {
		a.state = granted
		return q.take(a), true, false
	}
	q.enqueue(a)
	return 0, false, true
}

// requeue moves a waiting account whose holdings just dropped into the
// list its holdings now put it in.
func (q *policy) requeue(a *Account) {
	switch {
	case a.in == inNone && a.held < q.cap: // was parked at the cap
		q.parked--
		q.enqueue(a)
	case a.in == inGreedy && a.held == 0:
		q.greedy.remove(a)
		q.hungry.push(a)
	}
}

// enqueue puts a waiting account where its holdings call for.
func (q *policy) enqueue(a *Account) {
	switch {
	case a.held == 0:
		q.hungry.push(a)
	case a.held < q.cap:
		q.greedy.push(a)
	default:
		a.in = inNone
		q.parked++
	}
}

// dispatch reserves a free buffer for the first eligible waiter, if there
// is one: hungry waiters first, greedy ones only when no hungry one waits.
func (q *policy) dispatch() (*Account, int32) {
	if len(q.free) == 0 {
		return nil, 0
	}
	var a *Account
	switch {
	case q.hungry.head != nil:
		a = q.hungry.pop()
	case q.greedy.head != nil:
		a = q.greedy.pop()
	default:
		return nil, 0
	}
	a.state = granted
	return a, q.take(a)
}

// take pops a free buffer and charges it to a.
func (q *policy) take(a *Account) int32 {
	idx := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	a.held++
	return idx
}

// waitList is an intrusive FIFO of accounts.
type waitList struct {
	head, tail *Account
	n          int
	id         listID // what an account in the list has in Account.in
}

func (l *waitList) push(a *Account) {
	a.in, a.prev, a.next = l.id, l.tail, nil
	if l.tail != nil {
		l.tail.next = a
	} else {
		l.head = a
	}
	l.tail = a
	l.n++
}

func (l *waitList) pop() *Account {
	a := l.head
	l.remove(a)
	return a
}

func (l *waitList) remove(a *Account) {
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		l.head = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	} else {
		l.tail = a.prev
	}
	a.in, a.prev, a.next = inNone, nil, nil
	l.n--
}
