//go:build !linux

package harness

import "time"

// MarkCPU cannot read other processes' CPU time here: there is no /proc.
func MarkCPU() CPUMark { return CPUMark{at: time.Now()} }
