package front

import (
	"os"
	"sync"
	"testing"
)

// TestAcceptsStopBesideAckStop: a worker that acknowledges a stop while
// Stop runs (one that let go of the socket for its own close, and sees the
// stop the moment it is set) is counted before it acknowledges, so Close's
// count never goes below zero (sync: negative WaitGroup counter) and Close
// returns once both workers have let go.
func TestAcceptsStopBesideAckStop(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 200000 {
		ws := []*fakeWorker{{}, {}}
		q, err := NewAccepts("test", int(f.Fd()), ws, 1)
		if err != nil {
			t.Fatal(err)
		}
		q.Post = func(a *Acceptor[*fakeWorker], stop bool) bool { return true }
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !q.stopping.Load() {
			}
			q.Per[0].AckStop()
		}()
		q.Stop()
		wg.Wait()
		q.Per[1].AckStop()
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
