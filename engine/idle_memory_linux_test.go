package engine_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/engine"
)

// residentBytes returns the process's resident memory, from
// /proc/self/statm.
func residentBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no statm: %v", err)
	}
	pages, err := strconv.ParseInt(strings.Fields(string(b))[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// TestIdleEngineMemory: engine.New with the default configuration (a
// pool of 64 MiB) leaves the pool's pages untouched, so an idle engine
// holds little memory; PrefaultPool makes the whole pool resident. The
// bounds are far apart (16 MiB against 48), so what else the process
// touches meanwhile cannot decide the result.
func TestIdleEngineMemory(t *testing.T) {
	const pool = engine.DefaultBuffers * engine.DefaultBufSize
	for _, tc := range []struct {
		runner   string
		prefault bool
		min, max int64 // growth of RSS across New
	}{
		// Without a prefault only the bound above matters: the rest of
		// the process (a previous test's garbage, the scavenger) may
		// give back more than New takes.
		{engine.RunnerURing, false, -1 << 62, 16 << 20},
		{engine.RunnerEpoll, false, -1 << 62, 16 << 20},
		{engine.RunnerGoroutine, false, -1 << 62, 16 << 20},
		{engine.RunnerGoroutine, true, pool * 3 / 4, 1 << 62},
	} {
		name := tc.runner
		if tc.prefault {
			name += " prefaulted"
		}
		t.Run(name, func(t *testing.T) {
			requireRunner(t, tc.runner)
			t.Setenv(engine.EnvRunner, "")
			before := residentBytes(t)
			e, err := engine.New(engine.Config{Runner: tc.runner, PrefaultPool: tc.prefault})
			if err != nil {
				t.Fatal(err)
			}
			grew := residentBytes(t) - before
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if grew < tc.min || grew > tc.max {
				t.Fatalf("RSS grew by %d KiB at New, want at least %d and at most %d KiB", grew>>10, tc.min>>10, tc.max>>10)
			}
			t.Logf("RSS grew by %d KiB at New", grew>>10)
		})
	}
}
