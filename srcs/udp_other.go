//go:build !linux

package srcs

import (
	"errors"
	"fmt"
)

// enableDropCounter does nothing: SO_RXQ_OVFL is Linux-only.
func enableDropCounter(int) error { return nil }

// udpDrops fails: only Linux exposes per-socket drop counters this way.
func udpDrops(uint64) (uint64, error) {
	return 0, fmt.Errorf("per-socket udp drop counters need Linux: %w", errors.ErrUnsupported)
}
