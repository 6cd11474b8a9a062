package fallback_test

import (
	"net"
	"testing"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/srcs"
)

// runner is the runner contract, as the runner suite states it.
type runner = runnertest.Runner

var (
	_ runner = (*fallback.Goroutine)(nil)
	_ runner = (*fallback.Thread)(nil)
	_ runner = (*fallback.Epoll)(nil)
)

func newGoroutine(cfg contract.RunnerConfig) (runner, error) { return fallback.NewGoroutine(cfg) }
func newThread(cfg contract.RunnerConfig) (runner, error)    { return fallback.NewThread(cfg) }
func newEpoll(cfg contract.RunnerConfig) (runner, error)     { return fallback.NewEpoll(cfg) }

// deadlineOnly wraps a connection as a source with a read deadline but no
// RawConn: the goroutine runner cannot wait for readability, so a lane
// takes a buffer first and waits for data inside Read.
func deadlineOnly(c net.Conn) srcs.Source { return hideRawConn(srcs.NewConn(c)) }

// hideRawConn hides every capability of s but its read deadline.
func hideRawConn(s *srcs.Conn) srcs.Source {
	return struct {
		srcs.Source
		srcs.Deadliner
	}{s, s}
}

// runners are the fallback runners under the runner suites, with what
// sets each apart (runnertest.Options), and whether it is one of the
// datagram suite's runs: the goroutine runner drives datagrams the same
// whatever its stream sources. The epoll runner skips where there is no
// epoll.
var runners = []struct {
	name      string
	newRunner runnertest.New
	o         runnertest.Options
	datagrams bool
}{
	// srcs.Conn as it is: a lane waits for readability on Go's netpoller
	// before it takes a buffer, and for more data inside Read while it
	// holds one. Go's netpoller reports only a lower bound of a dropped
	// datagram's length.
	{"goroutine", newGoroutine, runnertest.Options{LaneWorkers: true, ReadsInFlight: true, DropLowerBound: true}, true},
	{"goroutine/DeadlineOnly", newGoroutine, runnertest.Options{
		Source: deadlineOnly, LaneWorkers: true, ReadsInFlight: true, IdleHoldsBuffer: true, DropLowerBound: true,
	}, false},
	// A lane that holds data polls its descriptor with the flush deadline
	// as timeout, and a pause does not wake it.
	{"thread", newThread, runnertest.Options{LaneWorkers: true}, true},
	{"epoll", newEpoll, runnertest.Options{}, true},
}

// TestStreams runs the runners' stream suite (runnertest) on the fallback
// runners.
func TestStreams(t *testing.T) {
	for _, rc := range runners {
		t.Run(rc.name, func(t *testing.T) { runnertest.TestStreams(t, rc.newRunner, rc.o) })
	}
}

// TestDatagrams runs the runners' datagram suite (runnertest) on the
// fallback runners, which all drive datagram sockets.
func TestDatagrams(t *testing.T) {
	for _, rc := range runners {
		if rc.datagrams {
			t.Run(rc.name, func(t *testing.T) { runnertest.TestDatagrams(t, rc.newRunner, rc.o) })
		}
	}
}

// TestDescriptorAdmission runs the descriptor runners' admission cases
// (runnertest) on the thread and epoll runners.
func TestDescriptorAdmission(t *testing.T) {
	for _, rc := range runners {
		if rc.name == "thread" || rc.name == "epoll" {
			t.Run(rc.name, func(t *testing.T) { runnertest.TestDescriptorAdmission(t, rc.newRunner) })
		}
	}
}
