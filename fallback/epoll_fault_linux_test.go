package fallback

import (
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
)

// faultyEpoll is an Epoll whose workers the worker fault suite can fail,
// through the command the worker takes as its epoll_wait failing.
type faultyEpoll struct{ *Epoll }

func (e faultyEpoll) FailWorker(i int, err error) bool { return e.injectFault(i, err) }
func (e faultyEpoll) WorkerStopped(i int) bool         { return e.workers[i].Stopped() }

func (e faultyEpoll) WorkerOf(l *contract.Lane) (int, bool) {
	ref, ok := e.front.Lookup(l)
	if !ok {
		return 0, false
	}
	for i, w := range e.workers {
		if w == ref.W {
			return i, true
		}
	}
	return 0, false
}

func TestEpollWorkerFaults(t *testing.T) {
	runnertest.TestWorkerFaults(t, func(cfg contract.RunnerConfig) (runnertest.Faulty, error) {
		e, err := NewEpoll(cfg)
		if err != nil {
			return nil, err
		}
		return faultyEpoll{e}, nil
	})
}
