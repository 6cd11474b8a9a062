package runnertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// closeWhilePaused closes a paused runner whose lanes hold data: Close
// must not hang, and every lane finishes with srcs.ErrStopped.
func (s suite) closeWhilePaused(t *testing.T) {
	g := s.rig(t, pool.Config{Buffers: 4}, 2)
	var lanes []*contract.Lane
	for range 3 {
		client, l := g.Conn(time.Hour)
		client.Write([]byte("x"))
		lanes = append(lanes, l)
	}
	g.R.SetPaused(true)
	done := make(chan error, 1)
	go func() { done <- g.R.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close hung while paused")
	}
	got := g.Finished(len(lanes))
	for _, l := range lanes {
		if !errors.Is(got[l.ID].Err, srcs.ErrStopped) {
			t.Errorf("lane %d: %v, want srcs.ErrStopped", l.ID, got[l.ID].Err)
		}
	}
	if err := g.R.Close(); err != nil { // idempotent
		t.Error(err)
	}
}

// closeInFlight closes the runner while every lane is streaming, and while
// lanes wait for buffers that a slow consumer holds: Close must finish
// them all before it returns, leave no pool wait behind, refuse later
// lanes, and leave no goroutine behind.
func (s suite) closeInFlight(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			const lanes, buffers = 50, 16
			g := s.rig(t, pool.Config{Buffers: buffers}, 2)
			g.Rec.Hold = hold
			var wg sync.WaitGroup
			for i := range lanes {
				client, _ := g.Conn(time.Duration(i%3) * time.Millisecond)
				wg.Go(func() {
					buf := make([]byte, 1+rand.IntN(16<<10))
					for {
						if _, err := client.Write(buf); err != nil {
							return
						}
					}
				})
			}
			if hold {
				g.WaitUntil("lanes waiting for buffers", func() bool {
					return g.Rec.Held() == buffers && g.Pool.Stats().Waiters > 0
				})
			} else {
				g.WaitUntil("traffic on every lane", func() bool {
					for _, l := range g.Lanes() {
						if g.Rec.Lane(l.ID).Bytes == 0 {
							return false
						}
					}
					return true
				})
			}
			if err := g.R.Close(); err != nil {
				t.Fatal(err)
			}
			// Close waits for the workers, which finish every lane first.
			if n := len(g.Rec.Finished()); n != lanes {
				t.Errorf("%d of %d lanes finished when Close returned", n, lanes)
			}
			for id, lr := range g.Finished(lanes) {
				if !errors.Is(lr.Err, srcs.ErrStopped) {
					t.Errorf("lane %d: %v, want srcs.ErrStopped", id, lr.Err)
				}
			}
			if st := g.Pool.Stats(); st.Waiters != 0 {
				t.Errorf("after Close: %d pool waits left behind", st.Waiters)
			}
			if st := g.R.Stats(); st.Lanes != 0 || st.Threads != 0 {
				t.Errorf("after Close: %+v", st)
			}
			_, server := g.Dial()
			if err := g.R.Add(g.Lane(s.source(server), 0)); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Add after Close: %v, want net.ErrClosed", err)
			}
			if err := g.R.Close(); err != nil { // idempotent
				t.Error(err)
			}
			g.Shutdown() // closes the sources, which stops the writers
			wg.Wait()
			goleak.VerifyNone(t)
		})
	}
}
