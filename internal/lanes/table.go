package lanes

import "github.com/sluice-io/sluice/srcs"

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

// Table maps the lanes a runner drives to their Ref. It is not safe for
// concurrent use: the runner guards it with the mutex that guards its own
// closing, so that Add never races Close.
type Table[W interface {
	comparable
	Worker
}] struct {
	refs map[*srcs.Lane]Ref[W]
	next int // where the least-loaded search starts
}

// Get returns l's Ref, and false when l is not being driven.
func (t *Table[W]) Get(l *srcs.Lane) (Ref[W], bool) {
	r, ok := t.refs[l]
	return r, ok
}

// Put records that w drives l under tok.
func (t *Table[W]) Put(l *srcs.Lane, w W, tok uint64) {
	if t.refs == nil {
		t.refs = map[*srcs.Lane]Ref[W]{}
	}
	t.refs[l] = Ref[W]{w, tok}
}

// Has reports whether l is in the table.
func (t *Table[W]) Has(l *srcs.Lane) bool {
	_, ok := t.refs[l]
	return ok
}

// Forget drops l, unless it was added again meanwhile under another
// token.
func (t *Table[W]) Forget(l *srcs.Lane, tok uint64) {
	if r, ok := t.refs[l]; ok && r.Tok == tok {
		delete(t.refs, l)
	}
}

// Len returns the number of lanes in the table.
func (t *Table[W]) Len() int { return len(t.refs) }

// Pick returns the worker of ws that has not stopped and has the fewest
// lanes, starting the search after the last choice so that ties spread
// round-robin, or false when every worker has stopped. A failed worker
// has no lanes left, so without the stop check it would win every pick.
func (t *Table[W]) Pick(ws []W) (W, bool) {
	var best W
	found := false
	for i := range ws {
		w := ws[(t.next+i)%len(ws)]
		if !w.Stopped() && (!found || w.Load() < best.Load()) {
			best, found = w, true
		}
	}
	t.next++
	return best, found
}
