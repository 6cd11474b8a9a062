//go:build !linux

package synthetic

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketpair returns a connected pair of unix stream sockets, both
// close-on-exec and non-blocking. Without SOCK_CLOEXEC, holding
// syscall.ForkLock keeps a concurrent fork from inheriting them before
// the flag is set, as the net package does on these systems.
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return fds, os.NewSyscallError("socketpair", err)
	}
	for _, fd := range fds {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
			return fds, os.NewSyscallError("fcntl", err)
		}
	}
	return fds, nil
}
