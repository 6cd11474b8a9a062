package pool

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// policyRig drives a policy as the Pool does, with no lock, no clock and
// no slab, and keeps the buffers each account holds: those it claimed,
// and the one reserved for it until it claims it. It counts the waits
// for a buffer the policy says began, as the Pool does in Stats.Waits,
// and keeps which accounts have one pending.
type policyRig struct {
	q        policy
	buffers  int
	accts    []*Account
	owes     []bool // what each account's rate limit says
	bufs     map[*Account][]int32
	reserved map[*Account]int32
	pending  map[*Account]bool // a wait for a buffer began and has not ended
	waits    int               // waits for a buffer begun
	err      error             // what a step broke, for check
}

func newPolicyRig(buffers, perSource, accounts int) *policyRig {
	r := &policyRig{q: newPolicy(buffers, perSource), buffers: buffers, owes: make([]bool, accounts),
		bufs: map[*Account][]int32{}, reserved: map[*Account]int32{}, pending: map[*Account]bool{}}
	for i := range accounts {
		r.accts = append(r.accts, &Account{id: SourceID(i)})
	}
	return r
}

// A policy step names what an account does, as the Pool would have the
// policy hear it.
const (
	opTry     = "try"     // TryAcquire
	opWait    = "wait"    // Wait: a try, and a wait if it is refused
	opRelease = "release" // the oldest buffer the account claimed comes home
	opCancel  = "cancel"  // Cancel or Leave
	opClaim   = "claim"   // Claim
	opOwe     = "owe"     // its rate limit says it owes bytes
	opPaid    = "paid"    // it has paid: a hold ends (the limiter's timer)
)

var policyOps = []string{opTry, opWait, opRelease, opCancel, opClaim, opOwe, opPaid}

// do carries out op for account i and says what the policy decided: for
// try, "buf N" or "refused"; for wait, "buf N", "queued" (a wait for a
// buffer began), "held" (its rate limit holds it) or "" (it waits
// already); for paid, "lent N" (a buffer at once, no wait), "queued" or
// "" (it was not held); for claim, "claimed" or "nothing"; for the others,
// the account a buffer was granted to ("aN"), or "".
func (r *policyRig) do(op string, i int) string {
	a := r.accts[i]
	switch op {
	case opTry:
		idx, ok := r.q.try(a, r.owes[i])
		if !ok {
			return "refused"
		}
		r.bufs[a] = append(r.bufs[a], idx)
		return fmt.Sprintf("buf %d", idx)
	case opWait:
		if got := r.do(opTry, i); got != "refused" {
			return got
		}
		was := a.state
		switch {
		case r.q.wait(a, r.owes[i]):
			r.beginWait(a)
			return "queued"
		case was == idle:
			return "held"
		}
		return ""
	case opRelease:
		if len(r.bufs[a]) == 0 {
			return ""
		}
		idx := r.bufs[a][0]
		r.bufs[a] = r.bufs[a][1:]
		return r.granted(r.q.release(a, idx))
	case opCancel:
		idx, ok := r.reserved[a]
		if ok != (a.state == granted) {
			panic("rig: a reservation the policy does not know of")
		}
		delete(r.reserved, a)
		delete(r.pending, a)
		return r.granted(r.q.cancel(a, idx))
	case opClaim:
		if !r.q.claim(a) {
			return "nothing"
		}
		r.bufs[a] = append(r.bufs[a], r.reserved[a])
		delete(r.reserved, a)
		return "claimed"
	case opOwe:
		r.owes[i] = true
		return ""
	case opPaid:
		r.owes[i] = false
		idx, lent, queued := r.q.unhold(a)
		switch {
		case lent:
			if r.pending[a] {
				r.err = fmt.Errorf("a%d was lent a buffer at the end of a hold with a wait pending", a.id)
			}
			r.reserved[a] = idx
			return fmt.Sprintf("lent %d", idx)
		case queued:
			r.beginWait(a)
			return "queued"
		}
		return ""
	}
	panic("rig: unknown op " + op)
}

func (r *policyRig) granted(a *Account, idx int32) string {
	if a == nil {
		return ""
	}
	if _, ok := r.reserved[a]; ok {
		panic(fmt.Sprintf("rig: a%d granted a second reservation", a.id))
	}
	r.reserved[a] = idx
	if !r.pending[a] && r.err == nil {
		r.err = fmt.Errorf("a%d was granted a buffer as a waiter, but no wait for one began", a.id)
	}
	delete(r.pending, a)
	return fmt.Sprintf("a%d", a.id)
}

// beginWait counts a wait for a buffer that the policy says began.
func (r *policyRig) beginWait(a *Account) {
	if r.pending[a] && r.err == nil {
		r.err = fmt.Errorf("a%d began a second wait for a buffer", a.id)
	}
	r.pending[a] = true
	r.waits++
}

func (l *waitList) names() []string {
	var s []string
	for a := l.head; a != nil; a = a.next {
		s = append(s, fmt.Sprintf("a%d", a.id))
	}
	return s
}

// queues describes where the accounts wait.
func (r *policyRig) queues() string {
	return fmt.Sprintf("free %d hungry %v greedy %v parked %d rate %d waits %d", len(r.q.free),
		r.q.hungry.names(), r.q.greedy.names(), r.q.parked, r.q.rateHeld, r.waits)
}

type policyStep struct {
	op   string
	a    int
	want string
}

type policyCase struct {
	name               string
	buffers, perSource int
	accounts           int
	steps              []policyStep
	queues             string // r.queues() at the end
}

var policyCases = []policyCase{
	{
		name:    "free buffers and no waiters: first come, first served, low indices first",
		buffers: 3, perSource: 2, accounts: 2,
		steps: []policyStep{
			{opTry, 0, "buf 0"}, {opTry, 1, "buf 1"}, {opTry, 0, "buf 2"},
			{opRelease, 0, ""}, {opTry, 1, "buf 0"},
		},
		queues: "free 0 hungry [] greedy [] parked 0 rate 0 waits 0",
	},
	{
		name:    "a source at its cap is refused with buffers free, and parks until one of its own comes home",
		buffers: 4, perSource: 2, accounts: 1,
		steps: []policyStep{
			{opTry, 0, "buf 0"}, {opTry, 0, "buf 1"}, {opTry, 0, "refused"},
			{opWait, 0, "queued"}, {opTry, 0, "refused"},
			{opRelease, 0, "a0"}, {opClaim, 0, "claimed"}, {opClaim, 0, "nothing"},
		},
		queues: "free 2 hungry [] greedy [] parked 0 rate 0 waits 1",
	},
	{
		name:    "FIFO order across accounts, and a source served waits at the tail again",
		buffers: 1, perSource: 1, accounts: 4,
		steps: []policyStep{
			{opTry, 0, "buf 0"}, {opTry, 1, "refused"},
			{opWait, 1, "queued"}, {opWait, 2, "queued"}, {opWait, 3, "queued"},
			{opWait, 3, ""}, // waits already: no second wait
			{opRelease, 0, "a1"}, {opClaim, 1, "claimed"},
			{opRelease, 1, "a2"}, {opClaim, 2, "claimed"},
			{opWait, 1, "queued"}, {opWait, 0, "queued"},
			{opRelease, 2, "a3"},
		},
		queues: "free 0 hungry [a1 a0] greedy [] parked 0 rate 0 waits 5",
	},
	{
		name:    "contention: one buffer per source while one with empty hands waits",
		buffers: 2, perSource: 2, accounts: 3,
		steps: []policyStep{
			{opTry, 0, "buf 0"}, {opTry, 0, "buf 1"},
			{opWait, 1, "queued"}, {opWait, 0, "queued"}, // a1 hungry; a0 parked at the cap
			{opRelease, 0, "a1"}, // a0 now holds one: greedy, behind the hungry a1
			{opWait, 2, "queued"},
			{opRelease, 0, "a2"}, // a0 has empty hands: hungry, behind a2
			{opClaim, 1, "claimed"}, {opClaim, 2, "claimed"},
			{opRelease, 1, "a0"},
		},
		queues: "free 0 hungry [] greedy [] parked 0 rate 0 waits 3",
	},
	{
		name:    "a source that holds some gets a buffer more only when nobody with empty hands waits",
		buffers: 3, perSource: 2, accounts: 3,
		steps: []policyStep{
			{opTry, 0, "buf 0"}, {opTry, 0, "buf 1"}, {opTry, 1, "buf 2"},
			{opWait, 1, "queued"}, // a1 holds one: the second queue
			{opWait, 2, "queued"}, // a2 has empty hands: the first
			{opRelease, 0, "a2"}, {opRelease, 0, "a1"},
		},
		queues: "free 0 hungry [] greedy [] parked 0 rate 0 waits 2",
	},
	{
		name:    "a rate-held account gets no buffer until it has paid, and is then served like any waiter",
		buffers: 2, perSource: 2, accounts: 3,
		steps: []policyStep{
			{opOwe, 0, ""}, {opTry, 0, "refused"}, {opWait, 0, "held"}, // a hold, no wait for a buffer
			{opWait, 0, ""},                          // held already: no second hold, no wait
			{opTry, 1, "buf 0"}, {opTry, 1, "buf 1"}, // the hold keeps nobody else waiting
			{opWait, 2, "queued"},
			{opPaid, 0, "queued"}, // behind a2: the pool is dry, and its wait begins now
			{opRelease, 1, "a2"}, {opRelease, 1, "a0"},
		},
		queues: "free 0 hungry [] greedy [] parked 0 rate 0 waits 2",
	},
	{
		name:    "a hold that ends with a buffer free is lent one at once, with no wait for it",
		buffers: 1, perSource: 1, accounts: 1,
		steps: []policyStep{
			{opOwe, 0, ""}, {opWait, 0, "held"}, {opPaid, 0, "lent 0"},
			{opPaid, 0, ""}, // no hold to end
			{opClaim, 0, "claimed"},
		},
		queues: "free 0 hungry [] greedy [] parked 0 rate 0 waits 0",
	},
	{
		name:    "a hold that ends at the cap with a buffer free parks, and its wait begins",
		buffers: 2, perSource: 1, accounts: 1,
		steps: []policyStep{
			{opTry, 0, "buf 0"}, {opOwe, 0, ""}, {opWait, 0, "held"},
			{opPaid, 0, "queued"},
			{opRelease, 0, "a0"},
		},
		queues: "free 1 hungry [] greedy [] parked 0 rate 0 waits 1",
	},
	{
		name:    "a waiter cancelled leaves the queue, and a reservation cancelled goes to the next waiter",
		buffers: 1, perSource: 1, accounts: 4,
		steps: []policyStep{
			{opTry, 0, "buf 0"},
			{opWait, 1, "queued"}, {opWait, 2, "queued"}, {opWait, 3, "queued"},
			{opCancel, 2, ""},
			{opRelease, 0, "a1"},
			{opCancel, 1, "a3"}, {opClaim, 1, "nothing"},
			{opCancel, 0, ""}, // nothing to withdraw
		},
		queues: "free 0 hungry [] greedy [] parked 0 rate 0 waits 3",
	},
	{
		name:    "a rate hold and a parked wait cancelled",
		buffers: 2, perSource: 1, accounts: 2,
		steps: []policyStep{
			{opOwe, 0, ""}, {opWait, 0, "held"},
			{opTry, 1, "buf 0"}, {opWait, 1, "queued"},
			{opCancel, 0, ""}, {opCancel, 1, ""},
			{opRelease, 1, ""},
		},
		queues: "free 2 hungry [] greedy [] parked 0 rate 0 waits 1",
	},
}

func TestPolicy(t *testing.T) {
	for _, tc := range policyCases {
		t.Run(tc.name, func(t *testing.T) {
			r := newPolicyRig(tc.buffers, tc.perSource, tc.accounts)
			for n, s := range tc.steps {
				if got := r.do(s.op, s.a); got != s.want {
					t.Fatalf("step %d, %s a%d: got %q, want %q; %s", n, s.op, s.a, got, s.want, r.queues())
				}
				if err := r.check(); err != nil {
					t.Fatalf("step %d, %s a%d: %v", n, s.op, s.a, err)
				}
			}
			if got := r.queues(); got != tc.queues {
				t.Fatalf("at the end: %s, want %s", got, tc.queues)
			}
		})
	}
}

// check tests what holds after every call of the policy: no account holds
// more than the cap, every buffer is free or held by exactly one account,
// each waiting account is where its holdings put it, the counts match the
// lists, and while a buffer is free no queued waiter is left unserved. Of
// waits: an account queued for a buffer, or parked at the cap, has a wait
// for one pending and one its rate limit holds has none; waiters counts
// the former only; every grant to a waiter ended a wait that began, and
// no grant that ended a hold ended one.
func (r *policyRig) check() error {
	q := &r.q
	if r.err != nil {
		return r.err
	}
	if err := r.checkBuffers(); err != nil {
		return err
	}
	if err := r.checkWaits(); err != nil {
		return err
	}
	parked, rate := 0, 0
	for i, a := range r.accts {
		_, reserved := r.reserved[a]
		want := len(r.bufs[a])
		if reserved {
			want++
		}
		switch {
		case int(a.held) != want:
			return fmt.Errorf("a%d: held %d, but it has %d buffers", i, a.held, want)
		case a.held > q.cap:
			return fmt.Errorf("a%d holds %d buffers, past the cap of %d", i, a.held, q.cap)
		case reserved != (a.state == granted):
			return fmt.Errorf("a%d: state %d with a reservation %v", i, a.state, reserved)
		case a.state != waiting && a.in != inNone:
			return fmt.Errorf("a%d is not waiting but is in list %d", i, a.in)
		case a.state != waiting:
			continue
		}
		if err := q.checkWaiter(a); err != nil {
			return err
		}
		switch a.in {
		case inRate:
			rate++
		case inNone:
			parked++
		}
	}
	if parked != q.parked || rate != q.rateHeld {
		return fmt.Errorf("%d parked and %d held, counted %d and %d", parked, rate, q.parked, q.rateHeld)
	}
	for _, l := range []*waitList{&q.hungry, &q.greedy} {
		if err := l.check(); err != nil {
			return err
		}
	}
	if len(q.free) > 0 && (q.hungry.n > 0 || q.greedy.n > 0) {
		return fmt.Errorf("%d buffers free while waiters are queued: %s", len(q.free), r.queues())
	}
	return nil
}

// checkWaits tests that a wait for a buffer is pending for exactly the
// accounts queued for one or parked at the cap, and that waiters counts
// those and rateHeld the accounts their rate limit holds.
func (r *policyRig) checkWaits() error {
	queued, held := 0, 0
	for i, a := range r.accts {
		inQueue := a.state == waiting && a.in != inRate
		if r.pending[a] != inQueue {
			return fmt.Errorf("a%d: state %d in list %d, with a wait for a buffer pending %v", i, a.state, a.in, r.pending[a])
		}
		switch {
		case inQueue:
			queued++
		case a.state == waiting:
			held++
		}
	}
	if q := &r.q; q.waiters() != queued || q.rateHeld != held {
		return fmt.Errorf("%d accounts wait for a buffer and %d for their rate limit, counted %d and %d", queued, held, q.waiters(), q.rateHeld)
	}
	return nil
}

// checkBuffers tests that every buffer is free, claimed by one account or
// reserved for one, and in one place only.
func (r *policyRig) checkBuffers() error {
	seen := make([]bool, r.buffers)
	all := slices.Clone(r.q.free)
	for _, a := range r.accts {
		all = append(all, r.bufs[a]...)
		if idx, ok := r.reserved[a]; ok {
			all = append(all, idx)
		}
	}
	for _, idx := range all {
		if idx < 0 || int(idx) >= r.buffers {
			return fmt.Errorf("buffer index %d out of range", idx)
		}
		if seen[idx] {
			return fmt.Errorf("buffer %d is in two places", idx)
		}
		seen[idx] = true
	}
	if len(all) != r.buffers {
		return fmt.Errorf("%d of %d buffers are accounted for", len(all), r.buffers)
	}
	return nil
}

// checkWaiter tests that a waiting account waits where its holdings put it.
func (q *policy) checkWaiter(a *Account) error {
	switch a.in {
	case inHungry:
		if a.held != 0 {
			return fmt.Errorf("a%d waits with empty hands but holds %d", a.id, a.held)
		}
	case inGreedy:
		if a.held == 0 || a.held >= q.cap {
			return fmt.Errorf("a%d waits in the second queue holding %d (cap %d)", a.id, a.held, q.cap)
		}
	case inNone:
		if a.held != q.cap {
			return fmt.Errorf("a%d is parked holding %d, below the cap of %d", a.id, a.held, q.cap)
		}
	}
	return nil
}

// check walks the list both ways.
func (l *waitList) check() error {
	n := 0
	var prev *Account
	for a := l.head; a != nil; prev, a = a, a.next {
		if a.prev != prev || a.in != l.id || a.state != waiting {
			return fmt.Errorf("list %d is broken at a%d", l.id, a.id)
		}
		n++
	}
	if l.tail != prev || n != l.n {
		return fmt.Errorf("list %d has %d accounts and a tail of %v, counted %d", l.id, n, l.tail, l.n)
	}
	return nil
}

// FuzzPolicy drives the policy with any sequence of steps and checks, at
// every step, what check does, and of each grant: a buffer taken at once
// (try) goes only to an account under the cap that waits for nothing; a
// waiter granted a buffer is the head of its queue; nobody gets a second
// buffer while anyone with empty hands waits; a try is refused only for a
// reason (a wait or reservation pending, the cap, a rate hold, or no free
// buffer); and the queues stay in the order their waiters joined them. Of
// waits (checkStep): a wait for a buffer begins exactly when an idle
// account that owes nothing is refused, or a hold ends with no buffer it
// may take; a hold is never one; and a hold that ends with a buffer free
// and the account under the cap is lent it at once, passing no waiter.
func FuzzPolicy(f *testing.F) {
	f.Add([]byte{3, 1, 0, 0, 8, 15, 22, 2, 9})
	f.Add([]byte{1, 0, 0, 1, 8, 15, 22, 29, 2, 3, 11, 4, 6})
	f.Add([]byte{7, 3, 5, 1, 0, 7, 14, 21, 28, 35, 2, 6, 9, 16, 23, 30, 37, 3, 10, 4, 11})
	f.Add([]byte{2, 0, 0, 5, 1, 6, 7, 12, 13, 2, 6, 0, 5, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		const accounts = 5
		buffers := 1 + int(data[0]%8)
		perSource := 1 + int(data[1])%buffers
		r := newPolicyRig(buffers, perSource, accounts)
		fifo := newFIFOCheck()
		for n, b := range data[2:] {
			op, i := policyOps[int(b)%len(policyOps)], int(b)/len(policyOps)%accounts
			a := r.accts[i]
			was := stepBefore{hungry: r.q.hungry.members(), greedy: r.q.greedy.members(),
				state: a.state, in: a.in, held: a.held, owes: r.owes[i], free: len(r.q.free), waits: r.waits}
			got := r.do(op, i)
			fail := func(format string, args ...any) {
				t.Fatalf("step %d, %s a%d (%s): %s; now %s", n, op, i, got, fmt.Sprintf(format, args...), r.queues())
			}
			if err := r.check(); err != nil {
				fail("%v", err)
			}
			if err := fifo.check(&r.q); err != nil {
				fail("%v", err)
			}
			if err := r.checkStep(op, got, was); err != nil {
				fail("%v", err)
			}
		}
	})
}

// stepBefore is what FuzzPolicy saw before a step: the queues, and the
// stepping account's state, list, holdings and debt.
type stepBefore struct {
	hungry, greedy []*Account
	state          waitState
	in             listID
	held           int32
	owes           bool
	free, waits    int
}

// checkStep tests what the policy decided in one step, given what was
// before it.
func (r *policyRig) checkStep(op, got string, was stepBefore) error {
	limit := r.q.cap
	began := r.waits - was.waits
	switch {
	case op == opTry && got == "refused":
		if was.state == idle && was.held < limit && !was.owes && was.free > 0 {
			return fmt.Errorf("refused with %d free, holding %d of %d", was.free, was.held, limit)
		}
	case strings.HasPrefix(got, "buf"):
		if was.state != idle || was.held >= limit || was.owes {
			return fmt.Errorf("lent to an account in state %d holding %d that owes %v", was.state, was.held, was.owes)
		}
	case op == opWait:
		if want := was.state == idle && !was.owes; (got == "queued") != want || began != btoi(want) {
			return fmt.Errorf("a refused wait in state %d that owes %v began %d waits for a buffer", was.state, was.owes, began)
		}
		if (got == "held") != (was.state == idle && was.owes) {
			return fmt.Errorf("a wait in state %d that owes %v was held %v", was.state, was.owes, got == "held")
		}
		return nil
	case op == opPaid:
		return r.checkPaid(got, began, was)
	case strings.HasPrefix(got, "a"):
		return r.checkGrant(got, was)
	}
	if began != 0 {
		return fmt.Errorf("%s began %d waits for a buffer", op, began)
	}
	return nil
}

// checkPaid tests the end of a hold: lent a buffer at once, passing no
// waiter and beginning no wait, when one was free and the account under
// the cap; otherwise queued, a wait for a buffer begun.
func (r *policyRig) checkPaid(got string, began int, was stepBefore) error {
	switch {
	case was.state != waiting || was.in != inRate:
		if got != "" || began != 0 {
			return fmt.Errorf("no hold ended, yet %q and %d waits began", got, began)
		}
	case was.free > 0 && was.held < r.q.cap:
		if !strings.HasPrefix(got, "lent") || began != 0 {
			return fmt.Errorf("a hold ended with %d free, holding %d of %d: %q, %d waits began", was.free, was.held, r.q.cap, got, began)
		}
		if len(was.hungry)+len(was.greedy) > 0 {
			return fmt.Errorf("a hold ended with a buffer lent past %d queued waiters", len(was.hungry)+len(was.greedy))
		}
	case got != "queued" || began != 1:
		return fmt.Errorf("a hold ended with %d free, holding %d of %d: %q, %d waits began", was.free, was.held, r.q.cap, got, began)
	}
	return nil
}

// checkGrant tests a grant to a waiter: the head of its queue, and no
// second buffer while anyone with empty hands waits.
func (r *policyRig) checkGrant(got string, was stepBefore) error {
	var g int
	fmt.Sscanf(got, "a%d", &g)
	ga := r.accts[g]
	if ga.held >= 2 && r.q.hungry.n > 0 {
		return fmt.Errorf("a%d got a buffer more while %v wait with empty hands", g, r.q.hungry.names())
	}
	if slices.Contains(was.hungry, ga) && was.hungry[0] != ga {
		return fmt.Errorf("a%d was served before the head of the queue, a%d", g, was.hungry[0].id)
	}
	if slices.Contains(was.greedy, ga) && ga.held >= 2 && (was.greedy[0] != ga || len(was.hungry) > 0) {
		return fmt.Errorf("a%d was served out of turn: hungry %d, greedy head a%d", g, len(was.hungry), was.greedy[0].id)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (l *waitList) members() []*Account {
	var s []*Account
	for a := l.head; a != nil; a = a.next {
		s = append(s, a)
	}
	return s
}

// fifoCheck gives an account a ticket when it joins a queue, and checks
// that each queue is in ticket order: every waiter joined at the tail.
type fifoCheck struct {
	in     map[*Account]listID
	ticket map[*Account]int
	next   int
}

func newFIFOCheck() *fifoCheck {
	return &fifoCheck{in: map[*Account]listID{}, ticket: map[*Account]int{}}
}

func (c *fifoCheck) check(q *policy) error {
	seen := map[*Account]listID{}
	for _, l := range []*waitList{&q.hungry, &q.greedy} {
		last := -1
		for a := l.head; a != nil; a = a.next {
			seen[a] = l.id
			if c.in[a] != l.id {
				c.ticket[a] = c.next
				c.next++
			}
			if c.ticket[a] < last {
				return fmt.Errorf("a%d is ahead of a waiter that joined list %d before it", a.id, l.id)
			}
			last = c.ticket[a]
		}
	}
	c.in = seen
	return nil
}
