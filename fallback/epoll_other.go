//go:build !linux

package fallback

import (
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/internal/contract"
)

// Epoll is the edge-triggered epoll runner. epoll exists only on Linux:
// elsewhere NewEpoll fails with an error wrapping errors.ErrUnsupported, and
// the methods exist only so that callers need no build tags. A nil *Epoll
// is safe to call; it drives nothing.
type Epoll struct{}

// NewEpoll fails: epoll is Linux-only.
func NewEpoll(contract.RunnerConfig) (*Epoll, error) {
	return nil, fmt.Errorf("fallback: epoll: epoll needs Linux: %w", errors.ErrUnsupported)
}

// Name returns "epoll".
func (*Epoll) Name() string { return "epoll" }

// Add fails: epoll is Linux-only.
func (*Epoll) Add(*contract.Lane) error {
	return fmt.Errorf("fallback: epoll: add: epoll needs Linux: %w", errors.ErrUnsupported)
}

// Remove does nothing: no lane was ever added.
func (*Epoll) Remove(*contract.Lane) {}

// SetPaused does nothing.
func (*Epoll) SetPaused(bool) {}

// Close does nothing.
func (*Epoll) Close() error { return nil }

// Stats returns zero counters.
func (*Epoll) Stats() contract.RunnerStats { return contract.RunnerStats{Runner: "epoll"} }
