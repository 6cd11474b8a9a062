package front

import (
	"errors"
	"net"
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
)

// TestFront: a lane is placed on a running worker, refused twice and after
// Close, and once every worker has stopped Add reports the first failure.
func TestFront(t *testing.T) {
	a, b := &fakeWorker{}, &fakeWorker{}
	f := Front[*fakeWorker]{Name: "test", Workers: []*fakeWorker{a, b}}
	l1, l2, l3 := &contract.Lane{ID: 1}, &contract.Lane{ID: 2}, &contract.Lane{ID: 3}
	place := func(l *contract.Lane) error {
		return f.Place(l, func(w *fakeWorker) (uint64, bool, error) {
			if w == a {
				a.stopped = true // stopped since the pick: try the next
				return 0, false, nil
			}
			w.load++
			return 7, true, nil
		})
	}
	if err := place(l1); err != nil {
		t.Fatal(err)
	}
	if ref, ok := f.Lookup(l1); !ok || ref.W != b || ref.Tok != 7 {
		t.Fatalf("l1: %+v, %v", ref, ok)
	}
	if err := f.Addable(l1); err == nil || place(l1) == nil {
		t.Fatal("a lane was added twice")
	}
	f.Forget(l1, 8) // another incarnation's token: no effect
	if _, ok := f.Lookup(l1); !ok {
		t.Fatal("Forget with a stale token dropped the lane")
	}
	f.Forget(l1, 7)
	if _, ok := f.Lookup(l1); ok {
		t.Fatal("Forget kept the lane")
	}
	b.stopped = true
	if err := place(l2); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("every worker stopped, no failure: %v", err)
	}
	boom := errors.New("boom")
	f.Fail(boom)
	f.Fail(errors.New("later"))
	if err := place(l2); !errors.Is(err, boom) {
		t.Fatalf("every worker stopped: %v, want the first failure", err)
	}
	f.CloseErrs(errors.New("close"))
	waited := 0
	stops := map[*fakeWorker]int{}
	f.Ops.Post = func(w *fakeWorker, op Op, _ uint64) {
		if op == OpStop {
			stops[w]++
		}
	}
	f.Ops.Wait = func() { waited++ }
	for range 2 {
		if err := f.Control().Close(); err == nil || err.Error() != "close" {
			t.Fatalf("Close: %v", err)
		}
	}
	if stops[a] != 1 || stops[b] != 1 || waited != 2 {
		t.Fatalf("stops %v, waits %d", stops, waited)
	}
	if err := f.Addable(l3); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Addable after Close: %v", err)
	}
}

// TestFrontRemoveAndPause: Remove posts to the lane's worker with its
// token, and only for a lane the runner drives; only the end of a pause
// wakes the workers, once.
func TestFrontRemoveAndPause(t *testing.T) {
	a, b := &fakeWorker{}, &fakeWorker{}
	f := Front[*fakeWorker]{Name: "test", Workers: []*fakeWorker{a, b}}
	l := &contract.Lane{ID: 1}
	if err := f.Place(l, func(*fakeWorker) (uint64, bool, error) { return 9, true, nil }); err != nil {
		t.Fatal(err)
	}
	type post struct {
		w   *fakeWorker
		tok uint64
	}
	var posts []post
	resumed := map[*fakeWorker]int{}
	f.Ops = Ops[*fakeWorker]{
		Post: func(w *fakeWorker, op Op, tok uint64) {
			switch op {
			case OpRemove:
				posts = append(posts, post{w, tok})
			case OpResume:
				resumed[w]++
			}
		},
	}
	c := f.Control()
	c.Remove(l)
	c.Remove(&contract.Lane{ID: 2}) // never added
	f.Forget(l, 9)
	c.Remove(l) // finished
	if len(posts) != 1 || posts[0] != (post{a, 9}) {
		t.Fatalf("posts %v, want one to the lane's worker with its token", posts)
	}

	for _, p := range []bool{false, true, true, false, false} {
		c.SetPaused(p)
		if f.Paused.Load() != p {
			t.Fatalf("SetPaused(%v): flag %v", p, f.Paused.Load())
		}
	}
	if resumed[a] != 1 || resumed[b] != 1 {
		t.Fatalf("resumed %v, want each worker once", resumed)
	}
}
