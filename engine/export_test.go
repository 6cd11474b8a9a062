package engine

import "time"

// WithStallAfter sets how long a source may wait for a buffer, getting
// none, before it is reported stalled (ErrStalled), for tests that cannot
// wait for the default.
func WithStallAfter(d time.Duration) Option { return func(o *options) { o.stallAfter = d } }

// ChunksLoops returns how many loops over Chunks are in progress.
func (e *Engine) ChunksLoops() int {
	e.readers.mu.Lock()
	defer e.readers.mu.Unlock()
	return e.readers.n
}
