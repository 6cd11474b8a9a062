package fallback_test

import (
	"testing"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/runnertest"
	"github.com/sluice-io/sluice/srcs"
)

// TestDatagramRunners runs the runners' datagram suite (runnertest) on the
// fallback runners that drive datagram sockets.
func TestDatagramRunners(t *testing.T) {
	for _, rc := range []struct {
		name      string
		newRunner runnertest.New
		o         runnertest.Options
	}{
		// The goroutine runner reads through Go's netpoller, which reports
		// only a lower bound of a dropped datagram's length.
		{"goroutine", func(cfg srcs.RunnerConfig) (runnertest.Runner, error) { return fallback.NewGoroutine(cfg) }, runnertest.Options{LaneWorkers: true, DropLowerBound: true}},
		{"thread", func(cfg srcs.RunnerConfig) (runnertest.Runner, error) { return fallback.NewThread(cfg) }, runnertest.Options{LaneWorkers: true}},
		{"epoll", func(cfg srcs.RunnerConfig) (runnertest.Runner, error) { return fallback.NewEpoll(cfg) }, runnertest.Options{}},
	} {
		t.Run(rc.name, func(t *testing.T) { runnertest.TestDatagrams(t, rc.newRunner, rc.o) })
	}
}
