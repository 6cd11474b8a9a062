// How a uring worker receives datagrams: the ring polls an idle datagram
// socket, and a readable one is drained with recvmmsg(2) into the rooms of
// the lane's buffer, many datagrams a system call.

package ring

import (
	"time"

	"github.com/sluice-io/sluice/internal/runner/mmsg"
)

// advanceDgram receives what a readable datagram lane's socket holds.
func (w *worker) advanceDgram(ln *lane) { w.recvDgrams(ln) }

// recvDgrams receives a readable datagram lane's queued datagrams with
// recvmmsg(2) into the rooms of its buffer, without the ring: up to
// dgramTurnBatches batches a turn, and a lane still readable after them
// is advanced again next turn, at once.
func (w *worker) recvDgrams(ln *lane) {
	if w.mmsg == nil {
		w.mmsg = mmsg.NewReceiver(dgramBatch)
	}
	for i := range dgramTurnBatches {
		if i > 0 && w.r.front.Paused.Load() {
			w.host.Enqueue(ln) // parked until delivery resumes
			return
		}
		if !ln.Driver.Held() && !w.acquire(ln) {
			return
		}
		w.reads.Add(1)
		w.recvmmsg.Add(1)
		n, asked, drained, err := w.mmsg.Take(int(ln.fd), &ln.Driver, dgramBatch, w.r.log, "ring: runner")
		if err != nil {
			w.finish(ln, err)
			return
		}
		if drained {
			ln.readable = false
			ln.Driver.Idle()
			w.host.Settle(ln)
			w.host.Enqueue(ln)
			return
		}
		if n == 0 {
			continue // interrupted: receive again
		}
		w.host.Settle(ln)
		if ln.flushNow {
			ln.flushNow = false
			w.flushLane(ln, time.Now())
		}
		if n < asked {
			ln.readable = false // the queue ran dry: poll
			w.host.Enqueue(ln)
			return
		}
	}
	w.moreReady = true
	w.host.Enqueue(ln)
}

// A datagram lane takes up to dgramBatch datagrams with one recvmmsg(2),
// and up to dgramTurnBatches batches a turn before the worker's other
// lanes have theirs.
const (
	dgramBatch       = 64
	dgramTurnBatches = 4
)
