package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// ErrStalled is the error of a source that has waited for a pool buffer
// for a while without getting one: its chunks, or the pool's, were
// delivered and not released, so nothing more of it is read. A consumer
// that forgets to Release stalls its sources so; so does one that holds
// chunks for long (an output waiting for a server). The error handler
// hears it once per stall, as a *srcs.SourceError naming the source, and
// it counts as no error of the source's.
var ErrStalled = errors.New("engine: stalled")

// defaultStallAfter is how long a source may wait for a buffer, getting
// none, before it is reported stalled.
const defaultStallAfter = 10 * time.Second

// stallWatch is the state of the watch for stalled sources: the sources
// seen waiting at the last look, with the buffers they had acquired then.
// Only the watch's goroutine touches it.
type stallWatch struct {
	waiting  map[srcs.ID]uint64
	reported map[srcs.ID]bool
}

// watchStalls looks every stallAfter for sources that waited for a buffer
// through the whole interval without getting one, and reports each once
// per stall. It costs a look at the pool's figures while no source
// waits, and a pass over the sources only while some do. It ends with
// the engine's context.
func (e *Engine) watchStalls(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	w := stallWatch{waiting: map[srcs.ID]uint64{}, reported: map[srcs.ID]bool{}}
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		e.lookForStalls(&w, every)
	}
}

func (e *Engine) lookForStalls(w *stallWatch, every time.Duration) {
	if e.pool.Stats().Waiters == 0 {
		clear(w.waiting)
		clear(w.reported)
		return
	}
	e.mu.Lock()
	live := e.liveLocked()
	e.mu.Unlock()
	maxHeld := e.pool.Config().MaxPerSource
	now := make(map[srcs.ID]uint64, len(w.waiting))
	for _, s := range live {
		as := s.lane.Account.Stats()
		if !as.Waiting || as.RateLimited {
			continue
		}
		id := s.id()
		now[id] = as.Acquired
		if before, ok := w.waiting[id]; !ok || before != as.Acquired || w.reported[id] {
			continue
		}
		w.reported[id] = true
		ps := e.pool.Stats()
		var why string
		if as.Held >= maxHeld {
			why = fmt.Sprintf("holds its cap of %d buffers (MaxPerSource) in chunks delivered and not released, and has read nothing for %v", as.Held, every)
		} else {
			why = fmt.Sprintf("has waited %v for a buffer; %d of the pool's %d are held, %d of them in chunks delivered and not released", every, ps.InUse, ps.Buffers, max(ps.InUse-int(e.queued()), 0))
		}
		err := fmt.Errorf("%w: %s: a consumer must Release every chunk (range Chunks does)", ErrStalled, why)
		e.log.Warn("source stalled", "source", id, "name", s.name, "err", err)
		s.notify("read", err)
	}
	for id := range w.reported {
		if _, ok := now[id]; !ok || now[id] != w.waiting[id] {
			delete(w.reported, id) // it moved again: a later stall is new
		}
	}
	w.waiting = now
}

// queued returns the data chunks waiting in the delivery queues.
func (e *Engine) queued() int64 {
	n, _, _ := e.flow.snapshot()
	return n
}
