package fallback

import (
	"sync"

	"github.com/sluice-io/sluice/internal/contract"
)

// laneSet is the table of a runner that gives every lane a goroutine or
// a thread of its own (the goroutine and thread runners): its lanes, whether
// it is closed, and the wait for the lanes' goroutines. mu guards the
// runner's other state too.
type laneSet[L interface{ halt() }] struct {
	mu     sync.Mutex
	closed bool
	lanes  map[*contract.Lane]L
	wg     sync.WaitGroup
}

// remove halts l's lane, if the runner drives it, without waiting.
func (s *laneSet[L]) remove(l *contract.Lane) {
	s.mu.Lock()
	x, ok := s.lanes[l]
	s.mu.Unlock()
	if ok {
		x.halt()
	}
}

// closeAll marks the runner closed, halts every lane (outside mu, since a
// halting lane takes it to leave the table) and waits for their
// goroutines. Lanes report their own errors; it returns nil.
func (s *laneSet[L]) closeAll() error {
	s.mu.Lock()
	s.closed = true
	halt := make([]L, 0, len(s.lanes))
	for _, x := range s.lanes {
		halt = append(halt, x)
	}
	s.mu.Unlock()
	for _, x := range halt {
		x.halt()
	}
	s.wg.Wait()
	return nil
}
