package front

import "github.com/sluice-io/sluice/internal/contract"

// Worker is what the table asks of a runner's worker.
type Worker interface {
	// Stopped reports whether the worker takes no more lanes (it failed
	// or was closed). Any goroutine.
	Stopped() bool
	// Load is the number of lanes assigned to the worker. Any goroutine.
	Load() int64
}

// Ref says which worker drives a lane, under which token.
type Ref[W comparable] struct {
	W   W
	Tok uint64
}

// Table is the set of lanes a runner drives, each with its Ref. It keeps
// a lane's Ref in the lane itself (contract.Lane.Runner: the worker's index
// and the token), not in a map of its own, which would cost an entry per
// connection. It is not safe for concurrent use: the runner guards it
// with the mutex that guards its own closing, so that Add never races
// Close.
type Table[W interface {
	comparable
	Worker
}] struct {
	n    int // lanes in the table
	next int // where the least-loaded search starts
}

// Get returns l's Ref among ws, the workers Put was given indices of, and
// false when l is not being driven.
func (t *Table[W]) Get(l *contract.Lane, ws []W) (Ref[W], bool) {
	r := l.Runner
	if r.Worker == 0 || int(r.Worker) > len(ws) {
		return Ref[W]{}, false
	}
	return Ref[W]{ws[r.Worker-1], r.Token}, true
}

// Put records that worker i drives l under tok.
func (t *Table[W]) Put(l *contract.Lane, i int, tok uint64) {
	if l.Runner.Worker == 0 {
		t.n++
	}
	l.Runner = contract.RunnerRef{Worker: uint32(i) + 1, Token: tok}
}

// Has reports whether l is in the table.
func (t *Table[W]) Has(l *contract.Lane) bool { return l.Runner.Worker != 0 }

// Forget drops l, unless it was added again meanwhile under another
// token.
func (t *Table[W]) Forget(l *contract.Lane, tok uint64) {
	if l.Runner.Worker != 0 && l.Runner.Token == tok {
		l.Runner = contract.RunnerRef{}
		t.n--
	}
}

// Len returns the number of lanes in the table.
func (t *Table[W]) Len() int { return t.n }

// Pick returns the worker of ws that has not stopped and has the fewest
// lanes, starting the search after the last choice so that ties spread
// round-robin, or false when every worker has stopped. A failed worker
// has no lanes left, so without the stop check it would win every pick.
func (t *Table[W]) Pick(ws []W) (W, bool) {
	i, ok := t.pick(ws)
	if !ok {
		var none W
		return none, false
	}
	return ws[i], true
}

// pick is Pick, returning the worker's index in ws.
func (t *Table[W]) pick(ws []W) (int, bool) {
	best := -1
	for k := range ws {
		i := (t.next + k) % len(ws)
		if w := ws[i]; !w.Stopped() && (best < 0 || w.Load() < ws[best].Load()) {
			best = i
		}
	}
	t.next++
	return best, best >= 0
}
