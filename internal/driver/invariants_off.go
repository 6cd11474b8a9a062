//go:build !invariants

package driver

import "github.com/sluice-io/sluice/pool"

// Invariants reports whether this build checks the Lane's own rules (build
// with -tags invariants).
const Invariants = false

// invariants is empty outside invariants builds: every check compiles away.
type invariants struct{}

func (*invariants) reset()         {}
func (*invariants) held(*pool.Buf) {}
func (*invariants) gone(*pool.Buf) {}
func (*invariants) live()          {}
func (*invariants) finish()        {}
