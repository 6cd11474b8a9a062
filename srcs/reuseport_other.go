//go:build !unix

package srcs

import (
	"errors"
	"fmt"
	"syscall"
)

// reusePort fails: SO_REUSEPORT is a Unix socket option.
func reusePort(_, _ string, _ syscall.RawConn) error {
	return fmt.Errorf("srcs: listen tcp: ReusePort: %w", errors.ErrUnsupported)
}
