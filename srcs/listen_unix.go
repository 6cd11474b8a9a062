//go:build unix

package srcs

import (
	"fmt"
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
