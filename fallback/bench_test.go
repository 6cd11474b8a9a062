package fallback_test

import (
	"net"
	"os"
	"testing"

	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/srcs"
)

// netConn makes a source of a socketpair's end as a net.Conn on Go's
// netpoller, the way the goroutine runner reads best.
func netConn(fd int) (*srcs.Conn, error) {
	f := os.NewFile(uintptr(fd), "socketpair")
	c, err := net.FileConn(f) // dups the descriptor
	f.Close()
	if err != nil {
		return nil, err
	}
	return srcs.NewConn(c), nil
}

// One lane, 64 KiB per iteration: the runner reads on its own goroutine
// or thread.
func BenchmarkGoroutine(b *testing.B) {
	runnertest.Bench(b, newGoroutine, runnertest.BenchConfig{Lanes: 1, PerLane: 64 << 10, Source: func(fd int) (srcs.Source, error) {
		return netConn(fd)
	}})
}

// A source with a deadline but no RawConn: the lane takes a buffer, then
// waits for data inside Read.
func BenchmarkGoroutineDeadlineOnly(b *testing.B) {
	runnertest.Bench(b, newGoroutine, runnertest.BenchConfig{Lanes: 1, PerLane: 64 << 10, Source: func(fd int) (srcs.Source, error) {
		c, err := netConn(fd)
		if err != nil {
			return nil, err
		}
		return hideRawConn(c), nil
	}})
}

func BenchmarkThread(b *testing.B) {
	runnertest.Bench(b, newThread, runnertest.BenchConfig{Lanes: 1, PerLane: 64 << 10})
}

// BenchmarkEpoll drives one lane, and a hundred, on one worker.
func BenchmarkEpoll(b *testing.B) {
	b.Run("lanes=1", func(b *testing.B) {
		runnertest.Bench(b, newEpoll, runnertest.BenchConfig{Lanes: 1, Workers: 1, PerLane: 64 << 10})
	})
	b.Run("lanes=100", func(b *testing.B) {
		runnertest.Bench(b, newEpoll, runnertest.BenchConfig{Lanes: 100, Workers: 1, PerLane: 16 << 10})
	})
}
