package ring

import (
	"testing"
	"time"
)

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
