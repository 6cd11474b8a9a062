package engine

import (
	"fmt"
	"os"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/ring"
)

// factory builds a runner, or says why it cannot work here. Building is
// the probe: a runner's constructor checks what it needs of the kernel.
type factory func(contract.RunnerConfig) (contract.Runner, error)

// ladder is the order auto tries runners in. The thread runner is never
// chosen automatically: it is the baseline, for comparison.
var ladder = [...]string{RunnerURing, RunnerEpoll, RunnerGoroutine}

func defaultFactories() map[string]factory {
	return map[string]factory{
		RunnerURing:     newURingRunner,
		RunnerEpoll:     func(c contract.RunnerConfig) (contract.Runner, error) { return asRunner(fallback.NewEpoll(c)) },
		RunnerGoroutine: newGoroutineRunner,
		RunnerThread:    func(c contract.RunnerConfig) (contract.Runner, error) { return asRunner(fallback.NewThread(c)) },
	}
}

func newGoroutineRunner(c contract.RunnerConfig) (contract.Runner, error) {
	return asRunner(fallback.NewGoroutine(c))
}

func newURingRunner(c contract.RunnerConfig) (contract.Runner, error) {
	return asRunner(ring.NewRunner(c))
}

// asRunner converts a constructor's result, so that a failed constructor's
// nil pointer never becomes a non-nil Runner interface.
func asRunner[R contract.Runner](r R, err error) (contract.Runner, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

// RunnerError says why a requested runner cannot work here.
type RunnerError struct {
	Runner string
	Err    error
}

func (e *RunnerError) Error() string {
	return fmt.Sprintf("engine: runner %s unavailable: %v", e.Runner, e.Err)
}

func (e *RunnerError) Unwrap() error { return e.Err }

// chooseRunner builds the requested runner, or walks the auto ladder,
// logging why each step down was taken. SLUICE_RUNNER overrides the
// request. An explicit runner that cannot work is an error.
func chooseRunner(want string, rc contract.RunnerConfig, factories map[string]factory, log contract.Logger) (contract.Runner, error) {
	if env := os.Getenv(EnvRunner); env != "" {
		switch env {
		case RunnerAuto, RunnerURing, RunnerEpoll, RunnerGoroutine, RunnerThread:
		default:
			return nil, &ConfigError{EnvRunner, env, "must be auto, uring, epoll, goroutine or thread"}
		}
		log.Info("runner overridden by environment", "var", EnvRunner, "runner", env, "config", want)
		want = env
	}
	if want != RunnerAuto {
		r, err := factories[want](rc)
		if err != nil {
			return nil, &RunnerError{want, err}
		}
		log.Info("runner chosen", "runner", want, "reason", "requested")
		return r, nil
	}
	var skipped []error
	for _, name := range ladder {
		r, err := factories[name](rc)
		if err == nil {
			log.Info("runner chosen", "runner", name, "reason", "auto")
			return r, nil
		}
		log.Info("runner skipped", "runner", name, "reason", err)
		skipped = append(skipped, &RunnerError{name, err})
	}
	return nil, fmt.Errorf("engine: no runner works here: %v", skipped)
}
