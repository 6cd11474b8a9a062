package engine

import (
	"errors"
	"fmt"
	"io"

	"github.com/sluice-io/sluice/srcs"
)

// State is where a source is in its life.
type State uint8

const (
	// Opening: Open is running (a dial, an open(2)).
	Opening State = iota
	// Running: a runner is driving the source.
	Running
	// BackingOff: the last session failed; the next Open waits for the
	// backoff delay.
	BackingOff
	// Closed: the source ended (end of stream, or stopped) and is closed.
	Closed
	// Failed: the source ended on an error it cannot recover from.
	Failed
)

func (s State) String() string {
	switch s {
	case Opening:
		return "opening"
	case Running:
		return "running"
	case BackingOff:
		return "backing-off"
	case Closed:
		return "closed"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("state(%d)", s)
}

// Done reports whether the state is final.
func (s State) Done() bool { return s == Closed || s == Failed }

// event is something that happened to a source.
type event uint8

const (
	evOpened     event = iota // Open succeeded
	evOpenFailed              // Open failed with err
	evFinished                // the runner finished the lane with err
	evStop                    // the user or shutdown asked the source to stop
	evRetry                   // the backoff delay passed
)

// actions is what the engine must do after a transition, in this order:
// close, report, then one of add, remove, open, openAfter, and eos.
type actions uint16

const (
	actClose     actions = 1 << iota // close the source's session
	actReport                        // hand err to the error handler, after the data
	actAdd                           // hand the lane to the runner
	actRemove                        // ask the runner to stop the lane
	actOpen                          // open again now (repeat a file)
	actOpenAfter                     // open again after the backoff delay for attempt
	actEOS                           // deliver the end-of-stream chunk
)

// lifecycle is a source's state machine. It is deterministic and does no
// I/O: the engine feeds it events and carries out the actions it returns,
// so the policy can be tested without sockets or timers. Not safe for
// concurrent use; the engine serialises events per source.
type lifecycle struct {
	state     State
	stopping  bool
	reconnect bool  // the source implements srcs.Reconnector
	attempts  int32 // the Reconnector's bound on consecutive failures; 0 = none
	failures  int32 // consecutive failed sessions
}

// step applies an event. err is the error of evOpenFailed and evFinished;
// again is the Repeater's answer at end of stream. It returns the actions
// to take and the attempt number for actOpenAfter.
func (lc *lifecycle) step(ev event, err error, again bool) (actions, int) {
	switch ev {
	case evStop:
		if lc.state.Done() || lc.stopping {
			return 0, 0
		}
		lc.stopping = true
		switch lc.state {
		case Running:
			return actRemove, 0
		case BackingOff:
			lc.state = Closed
			return actEOS, 0
		}
		return 0, 0 // Opening: the open's outcome finishes the job

	case evOpened:
		if lc.stopping {
			lc.state = Closed
			return actClose | actEOS, 0
		}
		lc.state = Running
		lc.failures = 0
		return actAdd, 0

	case evOpenFailed:
		if lc.stopping {
			lc.state = Closed
			return actEOS, 0
		}
		return lc.fail(0)

	case evRetry:
		if lc.stopping || lc.state != BackingOff {
			return 0, 0
		}
		lc.state = Opening
		return actOpen, 0

	case evFinished:
		switch {
		case errors.Is(err, srcs.ErrStopped):
			lc.state = Closed
			return actClose | actEOS, 0
		case lc.stopping:
			// A stop raced a real end: still report an error, but do not
			// reconnect.
			lc.state = Closed
			if errors.Is(err, io.EOF) {
				return actClose | actEOS, 0
			}
			return actClose | actReport | actEOS, 0
		case errors.Is(err, io.EOF) && again:
			lc.state = Opening
			return actClose | actOpen, 0
		case errors.Is(err, io.EOF) && lc.reconnect:
			// The peer ended the session cleanly; a reconnecting source
			// comes back without treating that as an error.
			lc.state = BackingOff
			return actClose | actOpenAfter, 0
		case errors.Is(err, io.EOF):
			lc.state = Closed
			return actClose | actEOS, 0
		}
		return lc.fail(actClose)
	}
	return 0, 0
}

// fail handles a failed open or session: back off if the source can
// reconnect and has attempts left, else fail for good.
func (lc *lifecycle) fail(acts actions) (actions, int) {
	lc.failures++
	if lc.reconnect && (lc.attempts == 0 || lc.failures < lc.attempts) {
		lc.state = BackingOff
		return acts | actReport | actOpenAfter, int(lc.failures)
	}
	lc.state = Failed
	return acts | actReport | actEOS, 0
}
