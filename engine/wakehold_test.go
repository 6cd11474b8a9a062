package engine

import (
	"sync"
	"testing"
	"time"
)

// TestWakeHoldDefersTheSignal: a push while wake-ups are held leaves the
// consumer asleep; the last release wakes it once.
func TestWakeHoldDefersTheSignal(t *testing.T) {
	h := &wakeHold{}
	q := newQueue(h)
	h.shards = []*queue{q}

	h.HoldWakeups()
	h.HoldWakeups() // a second worker
	q.push(item{})
	q.push(item{})
	if len(q.ready) != 0 {
		t.Fatal("a push signalled while wake-ups were held")
	}
	h.ReleaseWakeups()
	if len(q.ready) != 0 {
		t.Fatal("signalled while another worker still held")
	}
	h.ReleaseWakeups()
	if len(q.ready) != 1 {
		t.Fatal("the last release did not signal the pending queue")
	}
	<-q.ready
	h.HoldWakeups()
	h.ReleaseWakeups()
	if len(q.ready) != 0 {
		t.Fatal("a release signalled a queue nothing was pushed to")
	}
	q.push(item{})
	if len(q.ready) != 1 {
		t.Fatal("a push with nothing held did not signal")
	}
}

// TestWakeHoldLosesNoWakeup races producers that hold, push and release
// against a consumer that sleeps whenever the queue is empty: every item
// must be taken, which a lost wake-up would stall.
func TestWakeHoldLosesNoWakeup(t *testing.T) {
	h := &wakeHold{}
	q := newQueue(h)
	h.shards = []*queue{q}
	const producers, each = 4, 20000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				held := (i+p)%3 != 0
				if held {
					h.HoldWakeups()
				}
				q.push(item{})
				if held {
					h.ReleaseWakeups()
				}
			}
		})
	}
	got := 0
	stall := time.NewTimer(10 * time.Second)
	defer stall.Stop()
	for got < producers*each {
		if _, ok, _ := q.pop(); ok {
			got++
			continue
		}
		select {
		case <-q.ready:
		case <-stall.C:
			t.Fatalf("consumer stalled with %d of %d items taken and %d queued: a wake-up was lost", got, producers*each, q.n)
		}
	}
	wg.Wait()
}
