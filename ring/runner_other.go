//go:build !linux

package ring

import (
	"github.com/sluice-io/sluice/internal/contract"

	"github.com/sluice-io/sluice/internal/runner/uring"
)

var errRunnerNotLinux = &uring.NotSupportedError{Op: "runner", Reason: "io_uring needs Linux"}

// Runner is the io_uring runner. On this OS it cannot be created.
type Runner struct{}

// NewRunner returns an error matching ErrNotSupported on this OS.
func NewRunner(cfg contract.RunnerConfig) (*Runner, error) { return nil, errRunnerNotLinux }

// Name returns "uring".
func (r *Runner) Name() string { return "uring" }

// Add returns an error matching ErrNotSupported on this OS.
func (r *Runner) Add(l *contract.Lane) error { return errRunnerNotLinux }

func (r *Runner) Remove(l *contract.Lane)     {}
func (r *Runner) SetPaused(paused bool)       {}
func (r *Runner) Close() error                { return nil }
func (r *Runner) Stats() contract.RunnerStats { return contract.RunnerStats{Runner: "uring"} }
