package uring

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
		requireFeature(t, "IORING_FEAT_MIN_TIMEOUT", func(k kernel) bool { return k.feats&FeatMinTimeout != 0 }, 6, 12)
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
