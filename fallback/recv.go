package fallback

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// datagramFlags are the recvmsg flags of the descriptor runners. MSG_TRUNC
// makes the kernel return a datagram's real length even when it was longer
// than the buffer, so a truncated datagram shows as n > len(p), and as the
// returned MSG_TRUNC flag on systems that ignore the request.
const datagramFlags = unix.MSG_TRUNC | unix.MSG_DONTWAIT

// recvDatagram receives one datagram from a non-blocking or readable
// socket into p. n is its length; truncated reports that it did not fit p
// and is lost. The sender's address is not kept, but x/sys/unix converts
// it anyway: a small allocation or two per datagram on the epoll and thread
// runners (the ring runner allocates nothing).
func recvDatagram(fd int, p []byte) (n int, truncated bool, err error) {
	n, _, flags, _, err := unix.Recvmsg(fd, p, nil, datagramFlags)
	return n, n > len(p) || flags&unix.MSG_TRUNC != 0, err
}

// checkDatagramSocket checks that a Datagram descriptor is a SOCK_DGRAM
// socket: a stream socket would lose data to MSG_TRUNC, and a seqpacket
// one ends with a zero-length read, which a datagram lane takes for an
// empty datagram.
func checkDatagramSocket(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	switch {
	case err == unix.ENOTSOCK:
		return fmt.Errorf("datagram descriptor %d: %w", fd, unix.ENOTSOCK)
	case err != nil:
		return fmt.Errorf("datagram descriptor %d: %w", fd, os.NewSyscallError("getsockopt", err))
	case typ != unix.SOCK_DGRAM:
		return fmt.Errorf("datagram descriptor %d is a socket of type %d, not SOCK_DGRAM: %w", fd, typ, unix.EPROTOTYPE)
	}
	return nil
}
