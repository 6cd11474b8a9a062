//go:build unix

package srcs

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenControl returns the net.ListenConfig.Control that sets cfg's
// socket options on a TCP listener before it binds, or nil if it sets
// none.
func listenControl(cfg ListenerConfig) func(_, _ string, c syscall.RawConn) error {
	if !cfg.ReusePort && cfg.RecvBuffer == 0 {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if cfg.ReusePort {
				if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
					serr = fmt.Errorf("SO_REUSEPORT: %w", err)
					return
				}
			}
			if cfg.RecvBuffer > 0 {
				if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.RecvBuffer); err != nil {
					serr = fmt.Errorf("SO_RCVBUF: %w", err)
				}
			}
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("srcs: listen tcp: %w", err)
		}
		return nil
	}
}

// setRecvBuffer sets SO_RCVBUF on the listening socket, which the
// connections it accepts from then on inherit.
func (l *Listener) setRecvBuffer(bytes int) error {
	sc, ok := l.ln.(syscall.Conn)
	if !ok {
		return errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, bytes)
	}); err != nil {
		return err
	}
	return os.NewSyscallError("setsockopt SO_RCVBUF", serr)
}

// autoRecvSupported says automatic receive buffers can be set here.
const autoRecvSupported = true
