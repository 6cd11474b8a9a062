//go:build invariants || race

package pool

// invariants enables the expensive checks: released buffers are poisoned so
// that a use after release reads garbage loudly instead of stale data.
const invariants = true
