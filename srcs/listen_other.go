//go:build !unix

package srcs

import (
	"errors"
	"fmt"
	"syscall"
)

// listenControl fails for ReusePort and RecvBuffer: they are set as Unix
// socket options.
func listenControl(cfg ListenerConfig) func(_, _ string, c syscall.RawConn) error {
	switch {
	case cfg.ReusePort:
		return func(_, _ string, _ syscall.RawConn) error {
			return fmt.Errorf("srcs: listen tcp: ReusePort: %w", errors.ErrUnsupported)
		}
	case cfg.RecvBuffer > 0:
		return func(_, _ string, _ syscall.RawConn) error {
			return fmt.Errorf("srcs: listen tcp: RecvBuffer: %w", errors.ErrUnsupported)
		}
	}
	return nil
}

// setRecvBuffer is not supported: socket options are set as Unix ones.
func (l *Listener) setRecvBuffer(int) error { return errors.ErrUnsupported }

// autoRecvSupported says automatic receive buffers can be set here.
const autoRecvSupported = false
