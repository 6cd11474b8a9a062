package engine_test

import (
	"context"
	"testing"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/ring"
)

func TestAutoPicksURingHere(t *testing.T) {
	requireRunner(t, engine.RunnerURing)
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if e.Runner() != engine.RunnerURing {
		t.Fatalf("auto chose %s on a kernel whose probe passes:\n%s", e.Runner(), ring.Probe())
	}
}

func TestEnvOverridesRunner(t *testing.T) {
	t.Setenv(engine.EnvRunner, engine.RunnerGoroutine)
	e, err := engine.New(engine.Config{Runner: engine.RunnerEpoll, Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if e.Runner() != engine.RunnerGoroutine {
		t.Fatalf("chose %s despite %s=goroutine", e.Runner(), engine.EnvRunner)
	}
}
