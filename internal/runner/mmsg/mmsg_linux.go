//go:build linux

package mmsg

import (
	"structs"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
)

// mmsghdr is struct mmsghdr of <sys/socket.h>: a message header and the
// length the kernel received into it.
type mmsghdr struct {
	_   structs.HostLayout
	hdr unix.Msghdr
	len uint32
}

// Flags are the recvmmsg(2) flags Recv passes: never wait, and report a
// datagram's real length even when it was longer than its room, so that
// a truncated datagram shows as one.
const Flags = unix.MSG_DONTWAIT | unix.MSG_TRUNC

// Receiver receives up to Max datagrams with one system call. It is not
// safe for concurrent use: a worker owns one and uses it for each of its
// datagram sockets in turn.
type Receiver struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
}

// NewReceiver returns a Receiver for batches of at most n datagrams (1 to 1,024).
func NewReceiver(n int) *Receiver {
	n = min(max(n, 1), 1024) // the kernel's UIO_MAXIOV caps a batch
	return &Receiver{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n)}
}

// Max returns the largest batch the Receiver takes.
func (r *Receiver) Max() int { return len(r.hdrs) }

// Recv receives up to k datagrams from the socket fd without waiting: the
// i-th into space[i*stride : i*stride+room], but the last, which may take
// the rest of space. It returns how many arrived, how many it asked for
// (k, capped by Max and by what fits in space: fewer arriving than asked
// means the socket ran dry), and unix.EAGAIN when none was queued. Size
// and Truncated describe each datagram received.
func (r *Receiver) Recv(fd int, space []byte, stride, room, k int) (n, asked int, err error) {
	if stride < room || room < 1 {
		panic("mmsg: a datagram's room must be positive and fit in its stride")
	}
	k = min(k, len(r.hdrs), (len(space)-room)/stride+1)
	if k < 1 {
		panic("mmsg: no room for a datagram")
	}
	for i := range k {
		iov := &r.iovs[i]
		iov.Base = &space[i*stride]
		iov.SetLen(room)
		if i == k-1 {
			iov.SetLen(len(space) - i*stride)
		}
		r.hdrs[i] = mmsghdr{hdr: unix.Msghdr{Iov: iov}}
		r.hdrs[i].hdr.SetIovlen(1)
	}
	for {
		got, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&r.hdrs[0])),
			uintptr(k), Flags, 0, 0)
		switch errno {
		case 0:
			return int(got), k, nil
		case unix.EINTR:
			continue
		}
		return 0, k, errno
	}
}

// Room returns the room of the i-th datagram of the last Recv: i, since a
// receive fills its rooms in order.
func (r *Receiver) Room(i int) int { return i }

// Size returns the length of the i-th datagram of the last Recv: its real
// length, which exceeds its room when it was truncated.
func (r *Receiver) Size(i int) int { return int(r.hdrs[i].len) }

// Truncated reports whether the i-th datagram of the last Recv was longer
// than its room, so that only its head arrived.
func (r *Receiver) Truncated(i int) bool {
	return r.hdrs[i].hdr.Flags&unix.MSG_TRUNC != 0 || int(r.hdrs[i].len) > int(r.iovs[i].Len)
}

// Take receives up to limit datagrams from the socket fd into the rooms
// of l's buffer (driver.Lane.DatagramBatch) and commits what came: the
// one receive every runner that drains datagram sockets makes. It returns
// how many arrived and how many it asked for (fewer arriving means the
// socket ran dry); drained when none was queued (EAGAIN); and the error,
// in the driver's terms, that ends the lane. None arriving, not drained
// and no error: receive again.
func (r *Receiver) Take(fd int, l *driver.Lane, limit int, log contract.Logger, runner string) (n, asked int, drained bool, err error) {
	room, stride, k := l.DatagramBatch()
	n, asked, err = r.Recv(fd, l.Space(), stride, room, min(k, limit))
	errno := driver.Errno(err)
	switch driver.Result(n, errno, true) {
	case driver.ReadData:
		l.CommitDatagrams(n, r, time.Now(), log, runner)
	case driver.ReadDrained:
		return 0, asked, true, nil
	case driver.ReadFailed:
		return 0, asked, false, driver.ReadError("recvmmsg", errno)
	}
	return n, asked, false, nil
}
