//go:build !linux

package srcs

import (
	"errors"
	"fmt"
)

// newInotifyWaiter reports that only Linux has inotify: a Tail polls.
func newInotifyWaiter(string) (waiter, error) {
	return nil, fmt.Errorf("srcs: tail: inotify: %w", errors.ErrUnsupported)
}
