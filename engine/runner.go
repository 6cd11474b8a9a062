package engine

import (
	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/ring"
	"github.com/sluice-io/sluice/srcs"
)

// Runner drives lanes: it reads their sources into pool buffers on its own
// workers and hands the filled buffers to each lane's Emitter. The engine
// never sees how a runner schedules its work. All methods are safe for
// concurrent use.
type Runner interface {
	// Name is "uring", "epoll", "goroutine" or "thread".
	Name() string
	// Add starts driving l, whose source is open. Add does not block on
	// I/O. An error (srcs.ErrNoDescriptor, a thread limit, a closed
	// runner) means the runner will not drive l and will not call Finish.
	Add(l *srcs.Lane) error
	// Remove asks the runner to stop driving l: reads in flight are
	// cancelled, bytes already read are emitted (Partial), and
	// Finish(l, srcs.ErrStopped) follows. Remove does not wait. Removing
	// a lane that has finished is a no-op.
	Remove(l *srcs.Lane)
	// SetPaused stops (true) or resumes (false) posting new reads on every
	// lane. Reads in flight complete and are emitted. A paused runner still
	// honours Remove and Close.
	SetPaused(paused bool)
	// Close finishes every lane (each gets Finish with srcs.ErrStopped),
	// stops the workers and waits for them. It is idempotent.
	Close() error
	// Stats returns the runner's counters.
	Stats() srcs.RunnerStats
}

var (
	_ Runner = (*fallback.Goroutine)(nil)
	_ Runner = (*fallback.Thread)(nil)
	_ Runner = (*fallback.Epoll)(nil)
	_ Runner = (*ring.Runner)(nil)
)
