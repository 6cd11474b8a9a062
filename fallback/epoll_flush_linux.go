//go:build linux

// Flush deadlines of an epoll worker's partly filled buffers.

package fallback

import "time"

// flushDueNow flushes a lane whose deadline has passed or is within its
// slack (driver.Host.FlushDue).
func (w *epWorker) flushDueNow(ln *epLane, now time.Time) {
	// The deadline may have moved on a path that did not say so: flush
	// only when the driver agrees, and put the heap right.
	if ln.Driver.FlushIfDue(now) && ln.Driver.Cutting() && !ln.Waiting() {
		// The records wait for the buffer their tail moves into.
		w.acquire(ln)
	}
	w.host.Settle(ln)
}
