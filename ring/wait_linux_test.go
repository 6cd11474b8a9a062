package ring

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSubmitAndWaitBatch checks the semantics the uring runner's load-paced
// waits rely on: a batched wait returns what is ready after minWait, waits
// on for the first completion when nothing came (however long, with no
// timeout), and gives up at its timeout, even one shorter than minWait.
func TestSubmitAndWaitBatch(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		requireFeature(t, "IORING_FEAT_MIN_TIMEOUT")
		r := newRing(t, Config{Entries: 8})
		const minWait = 200 * time.Microsecond

		// Nothing in flight: the timeout ends the wait, with no error.
		start := time.Now()
		if _, err := r.SubmitAndWaitBatch(8, minWait, 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if n := r.CQReady(); n != 0 || time.Since(start) < 5*time.Millisecond {
			t.Fatalf("idle wait: %d ready after %v, want 0 after the 5ms timeout", n, time.Since(start))
		}

		// A timeout shorter than minWait ends the wait: the kernel would
		// wait out minWait first, and then the loop once more.
		start = time.Now()
		if _, err := r.SubmitAndWaitBatch(8, time.Second, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 20*time.Millisecond || took > 500*time.Millisecond {
			t.Fatalf("idle wait with a 20ms timeout and a 1s minWait took %v", took)
		}

		// A completion ready at submission is returned though fewer than
		// n arrived.
		sqe(t, r).PrepNop()
		if _, err := r.SubmitAndWaitBatch(8, minWait, -1); err != nil {
			t.Fatal(err)
		}
		if n := r.CQReady(); n != 1 {
			t.Fatalf("a NOP: %d ready, want 1", n)
		}
		r.CQAdvance(1)

		// The first completion arrives well after minWait, with no
		// timeout: the wait must last until it, not end at minWait
		// with nothing (which the kernel does when no timeout is given).
		rd, wr := socketpair(t, unix.SOCK_STREAM)
		sqe(t, r).PrepPollAdd(rd, unix.POLLIN)
		written := make(chan struct{})
		go func() {
			defer close(written)
			time.Sleep(10 * minWait)
			unix.Write(wr, []byte("x"))
		}()
		if _, err := r.SubmitAndWaitBatch(8, minWait, -1); err != nil {
			t.Fatal(err)
		}
		<-written
		if n := r.CQReady(); n != 1 {
			t.Fatalf("a poll completed after 10×minWait: %d ready, want 1", n)
		}
		r.CQAdvance(1)
	})
}

// TestPlanWait: how a worker waits, for each state it can be in. Every
// plan ends: a wait with no time limit asks for a completion that an
// operation in flight, or the Waker, will bring.
func TestPlanWait(t *testing.T) {
	const batch, hold, flush = 2 * time.Millisecond, 400 * time.Microsecond, 3 * time.Millisecond
	for _, c := range []struct {
		name string
		s    waitState
		want waitPlan
	}{
		{"idle", waitState{batchWait: batch}, waitPlan{n: 1, timeout: -1}},
		{"idle, a flush due", waitState{batchWait: batch, flush: flush, flushing: true}, waitPlan{n: 1, timeout: flush}},
		{"no SQE for the Waker or a lane", waitState{stuck: true, polling: 8, batchWait: batch}, waitPlan{n: 1, timeout: time.Millisecond}},
		{"many poll", waitState{polling: 40, batchWait: batch}, waitPlan{n: 40, batch: batch, timeout: -1}},
		{"many poll, at most a batch", waitState{polling: 4000, batchWait: batch, flush: flush, flushing: true},
			waitPlan{n: batchWaitNr, batch: batch, timeout: flush}},
		{"one polls, none held", waitState{polling: 1, fewStreams: true, batchWait: batch}, waitPlan{n: 1, timeout: -1}},
		{"a few streams held", waitState{polling: 3, fewStreams: true, streamHold: hold, batchWait: batch},
			waitPlan{n: 4, batch: hold, timeout: -1}},
		{"a few streams held, a flush due", waitState{polling: 3, fewStreams: true, streamHold: hold, batchWait: batch, flush: flush, flushing: true},
			waitPlan{n: 4, batch: hold, timeout: flush}},
		{"reads may be ready", waitState{readsIssued: true, polling: 40, fewStreams: true, streamHold: hold, batchWait: batch},
			waitPlan{n: 1, timeout: -1}},
		{"a lane waits for a buffer", waitState{starved: 1, polling: 40, batchWait: batch}, waitPlan{n: 1, timeout: -1}},
		{"batching off", waitState{polling: 40}, waitPlan{n: 1, timeout: -1}},
	} {
		if got := planWait(c.s); got != c.want {
			t.Errorf("%s: planWait(%+v) = %+v, want %+v", c.name, c.s, got, c.want)
		}
	}
}

// TestNextStep: what a lane does next, for each state it can be in.
func TestNextStep(t *testing.T) {
	for _, c := range []struct {
		name string
		v    laneView
		want laneStep
	}{
		{"idle socket", laneView{}, stepPoll},
		{"readable", laneView{readable: true}, stepRead},
		{"a poll in flight", laneView{inFlight: true}, stepNone},
		{"a read in flight", laneView{inFlight: true, readable: true}, stepNone},
		{"waiting for a buffer", laneView{waiting: true, readable: true}, stepNone},
		{"removed, a poll in flight", laneView{removing: true, inFlight: true}, stepCancel},
		{"removed, cancel issued", laneView{removing: true, inFlight: true, cancelled: true}, stepNone},
		{"removed, nothing in flight", laneView{removing: true}, stepNone},
		{"records wait for a buffer", laneView{cutting: true, readable: true}, stepCut},
		{"records wait, a pool wait pending", laneView{cutting: true, waiting: true}, stepNone},
		{"readable while paused", laneView{readable: true, paused: true}, stepPark},
		{"idle while paused: still polls", laneView{paused: true}, stepPoll},
		{"file", laneView{file: true, readable: true}, stepFile},
		{"file with reads in flight: reads ahead", laneView{file: true, readable: true, inFlight: true}, stepFile},
		{"file while paused", laneView{file: true, readable: true, paused: true}, stepPark},
	} {
		if got := nextStep(c.v); got != c.want {
			t.Errorf("%s: nextStep(%+v) = %d, want %d", c.name, c.v, got, c.want)
		}
	}
}
