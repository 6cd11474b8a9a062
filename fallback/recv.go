package fallback

import (
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
