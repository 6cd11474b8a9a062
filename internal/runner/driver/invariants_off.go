//go:build !invariants

package driver

import "github.com/sluice-io/sluice/pool"

// invariants is empty outside invariants builds: every check compiles away.
type invariants struct{}

func (*invariants) reset()         {}
func (*invariants) held(*pool.Buf) {}
func (*invariants) gone(*pool.Buf) {}
func (*invariants) live()          {}
func (*invariants) finish()        {}
