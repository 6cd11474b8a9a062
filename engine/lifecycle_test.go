package engine

import (
	"io"
	"testing"

	"github.com/sluice-io/sluice/srcs"
)

// TestLifecycle walks the state machine through scripted event sequences
// and checks every transition's state and actions.
func TestLifecycle(t *testing.T) {
	reset := srcs.ErrReset
	type step struct {
		ev      event
		err     error
		again   bool
		state   State
		acts    actions
		attempt int
	}
	for _, tc := range []struct {
		name      string
		reconnect bool
		attempts  int
		steps     []step
	}{
		{"open, run, end of stream", false, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evFinished, io.EOF, false, Closed, actClose | actEOS, 0},
		}},
		{"open fails without reconnect", false, 0, []step{
			{evOpenFailed, reset, false, Failed, actReport | actEOS, 0},
		}},
		{"read error without reconnect: close, report, end", false, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evFinished, reset, false, Failed, actClose | actReport | actEOS, 0},
		}},
		{"reconnect backs off with growing attempts, then recovers", true, 0, []step{
			{evOpenFailed, reset, false, BackingOff, actReport | actOpenAfter, 1},
			{evRetry, nil, false, Opening, actOpen, 0},
			{evOpenFailed, reset, false, BackingOff, actReport | actOpenAfter, 2},
			{evRetry, nil, false, Opening, actOpen, 0},
			{evOpened, nil, false, Running, actAdd, 0},
			{evFinished, reset, false, BackingOff, actClose | actReport | actOpenAfter, 1},
		}},
		{"reconnect gives up after its attempts", true, 2, []step{
			{evOpenFailed, reset, false, BackingOff, actReport | actOpenAfter, 1},
			{evRetry, nil, false, Opening, actOpen, 0},
			{evOpenFailed, reset, false, Failed, actReport | actEOS, 0},
		}},
		{"a reconnecting source comes back after a clean end", true, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evFinished, io.EOF, false, BackingOff, actClose | actOpenAfter, 0},
		}},
		{"a repeating source opens again at end of stream", false, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evFinished, io.EOF, true, Opening, actClose | actOpen, 0},
			{evOpened, nil, false, Running, actAdd, 0},
			{evFinished, io.EOF, false, Closed, actClose | actEOS, 0},
		}},
		{"stop while running removes, then closes", false, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evStop, nil, false, Running, actRemove, 0},
			{evStop, nil, false, Running, 0, 0},
			{evFinished, srcs.ErrStopped, false, Closed, actClose | actEOS, 0},
		}},
		{"stop while running wins over a racing error", true, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evStop, nil, false, Running, actRemove, 0},
			{evFinished, reset, false, Closed, actClose | actReport | actEOS, 0},
		}},
		{"stop while running, then a clean end", false, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evStop, nil, false, Running, actRemove, 0},
			{evFinished, io.EOF, false, Closed, actClose | actEOS, 0},
		}},
		{"stop while backing off ends at once", true, 0, []step{
			{evOpenFailed, reset, false, BackingOff, actReport | actOpenAfter, 1},
			{evStop, nil, false, Closed, actEOS, 0},
			{evRetry, nil, false, Closed, 0, 0},
		}},
		{"stop while opening closes what the open brings", false, 0, []step{
			{evStop, nil, false, Opening, 0, 0},
			{evOpened, nil, false, Closed, actClose | actEOS, 0},
		}},
		{"stop while opening, then the open fails", true, 0, []step{
			{evStop, nil, false, Opening, 0, 0},
			{evOpenFailed, reset, false, Closed, actEOS, 0},
		}},
		{"nothing happens after the end", false, 0, []step{
			{evOpened, nil, false, Running, actAdd, 0},
			{evFinished, io.EOF, false, Closed, actClose | actEOS, 0},
			{evStop, nil, false, Closed, 0, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := lifecycle{reconnect: tc.reconnect, attempts: int32(tc.attempts)}
			for i, s := range tc.steps {
				acts, attempt := lc.step(s.ev, s.err, s.again)
				if lc.state != s.state || acts != s.acts || attempt != s.attempt {
					t.Fatalf("step %d: state %v acts %b attempt %d; want %v %b %d",
						i, lc.state, acts, attempt, s.state, s.acts, s.attempt)
				}
			}
		})
	}
}

func TestStateNames(t *testing.T) {
	for s, want := range map[State]string{Opening: "opening", Running: "running", BackingOff: "backing-off", Closed: "closed", Failed: "failed"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
	if !Closed.Done() || !Failed.Done() || Running.Done() {
		t.Error("Done is wrong")
	}
}
