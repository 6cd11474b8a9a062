package synthetic

import (
	"os"

	"golang.org/x/sys/unix"
)

// socketpair returns a connected pair of unix stream sockets, both
// close-on-exec and non-blocking.
func socketpair() ([2]int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return fds, os.NewSyscallError("socketpair", err)
	}
	return fds, nil
}
