// Flush deadlines of a uring worker's partly filled buffers.

package ring

import (
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// due is when the lane's partial data must be emitted: Flush after its
// first byte. heapPush sets it, so heap comparisons do no time arithmetic.
func (ln *lane) due() time.Time { return ln.dueAt }

// flushSlack is how early before its deadline a partial buffer may go out
// with others that are due. Flush bounds how long data is held, so going
// early is always allowed; coalescing lets one wake-up flush every buffer
// due within the slack, instead of a timer wake-up per buffer when each
// message of a lightly loaded source becomes a chunk of its own.
func flushSlack(ln *lane) time.Duration { return ln.l.Flush / 4 }

// flushDue emits the partial data whose flush deadline has passed or is
// within its slack. A lane with a read in flight emits when the read
// completes.
func (w *worker) flushDue(now time.Time) {
	for len(w.heap) > 0 {
		ln := w.heap[0]
		if now.Before(ln.due().Add(-flushSlack(ln))) {
			return
		}
		if ln.op == tagRead {
			w.heapRemove(ln)
			ln.flushNow = true
			continue
		}
		w.emit(ln, srcs.Partial)
	}
}

// The flush heap is a binary min-heap of lanes by flush deadline; each
// lane knows its index so it can leave from the middle.

func (w *worker) heapLess(i, j int) bool { return w.heap[i].due().Before(w.heap[j].due()) }

func (w *worker) heapSwap(i, j int) {
	w.heap[i], w.heap[j] = w.heap[j], w.heap[i]
	w.heap[i].hidx = i
	w.heap[j].hidx = j
}

func (w *worker) heapPush(ln *lane) {
	ln.dueAt = ln.first.Add(ln.l.Flush)
	ln.hidx = len(w.heap)
	w.heap = append(w.heap, ln)
	w.heapUp(ln.hidx)
}

func (w *worker) heapRemove(ln *lane) {
	i, last := ln.hidx, len(w.heap)-1
	if i != last {
		w.heapSwap(i, last)
	}
	w.heap[last] = nil
	w.heap = w.heap[:last]
	ln.hidx = -1
	if i != last {
		w.heapDown(i)
		w.heapUp(i)
	}
}

func (w *worker) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !w.heapLess(i, p) {
			return
		}
		w.heapSwap(i, p)
		i = p
	}
}

func (w *worker) heapDown(i int) {
	for {
		l := 2*i + 1
		if l >= len(w.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(w.heap) && w.heapLess(r, l) {
			m = r
		}
		if !w.heapLess(m, i) {
			return
		}
		w.heapSwap(i, m)
		i = m
	}
}
