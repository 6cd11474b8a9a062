//go:build linux

package ring

import (
	"testing"

	"github.com/sluice-io/sluice/internal/testkit/runnertest"
)

func BenchmarkRunnerOneLane(b *testing.B) {
	requireURing(b)
	runnertest.Bench(b, newRunnerWith(runnerOptions{}), runnertest.BenchConfig{Lanes: 1, Workers: 1, PerLane: 1 << 20})
}

func BenchmarkRunner100Lanes(b *testing.B) {
	requireURing(b)
	runnertest.Bench(b, newRunnerWith(runnerOptions{}), runnertest.BenchConfig{Lanes: 100, Workers: 2, PerLane: 16 << 10})
}
