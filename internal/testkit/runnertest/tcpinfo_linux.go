package runnertest

import (
	"net"

	"golang.org/x/sys/unix"
)

// unacked returns how many bytes c has sent, or queued to send, that its
// peer has not acknowledged.
func unacked(c *net.TCPConn) (uint32, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return 0, err
	}
	if ierr != nil {
		return 0, ierr
	}
	return info.Unacked + info.Notsent_bytes, nil
}
