//go:build unix

package srcs

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePort is a net.ListenConfig.Control that sets SO_REUSEPORT.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("srcs: listen tcp: SO_REUSEPORT: %w", err)
	}
	return nil
}
