//go:build !linux

package mmsg

import "errors"

// Flags are the flags Recv would pass to recvmmsg(2); recvmmsg is Linux's.
const Flags = 0

// errUnsupported is what Recv returns where recvmmsg(2) does not exist.
var errUnsupported = errors.New("mmsg: recvmmsg is Linux only")

// Receiver receives up to Max datagrams with one system call; on this
// platform it receives none.
type Receiver struct{ max int }

// NewReceiver returns a Receiver for batches of at most n datagrams (1 to 1,024).
func NewReceiver(n int) *Receiver { return &Receiver{max: min(max(n, 1), 1024)} }

// Max returns the largest batch the Receiver takes.
func (r *Receiver) Max() int { return r.max }

// Recv fails: there is no recvmmsg(2) here.
func (r *Receiver) Recv(fd int, space []byte, stride, room, k int) (n, asked int, err error) {
	return 0, 0, errUnsupported
}

// Room returns i.
func (r *Receiver) Room(i int) int { return i }

// Size returns 0.
func (r *Receiver) Size(i int) int { return 0 }

// Truncated returns false.
func (r *Receiver) Truncated(i int) bool { return false }
