package uring

// SQE preparation helpers. They only fill memory, so they compile on every OS.
// Each mirrors the matching io_uring_prep_* helper of liburing
// (src/include/liburing.h): a Prep method overwrites every field but
// UserData, so set Flags and UserData after it (or UserData before).
//
// Memory passed to a Prep method ([]byte, *Timespec, *unix.Msghdr) is handed
// to the kernel as a bare address. The caller guarantees it stays valid and
// unmoved until the CQE arrives: off the Go heap (an [Arena], the buffer pool's
// slab) or in a per-slot array that outlives the operation. The Go garbage
// collector cannot see these references.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// PackUserData builds a user_data token from a slot index and a generation
// (or opcode tag). user_data is always an integer the caller owns; this
// package never stores a Go pointer in it.
func PackUserData(slot, gen uint32) uint64 { return uint64(gen)<<32 | uint64(slot) }

// UnpackUserData splits a token made by [PackUserData].
func UnpackUserData(ud uint64) (slot, gen uint32) { return uint32(ud), uint32(ud >> 32) }

// More reports whether the SQE that produced c stays armed (multishot).
func (c CQE) More() bool { return c.Flags&CQEFMore != 0 }

// BufferID returns the provided buffer the kernel picked, if any.
func (c CQE) BufferID() (bid uint16, ok bool) {
	return uint16(c.Flags >> CQEBufferShift), c.Flags&CQEFBuffer != 0
}

// Err returns the errno of a failed completion, or nil when Res >= 0.
func (c CQE) Err() error {
	if c.Res >= 0 {
		return nil
	}
	return unix.Errno(-c.Res)
}

// rw mirrors liburing io_uring_prep_rw: every field is reset except UserData.
func (s *SQE) rw(op Op, fd int, addr uint64, n uint32, off uint64) {
	*s = SQE{Opcode: op, Fd: int32(fd), Addr: addr, Len: n, Off: off, UserData: s.UserData}
}

func bufAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// PrepNop prepares a no-op, which completes with Res 0.
func (s *SQE) PrepNop() { s.rw(OpNop, -1, 0, 0, 0) }

// PrepRead prepares read(2) at offset off into buf. Use offset 0 for sockets,
// pipes and eventfds, and ^uint64(0) for the file position.
func (s *SQE) PrepRead(fd int, buf []byte, off uint64) {
	s.rw(OpRead, fd, bufAddr(buf), uint32(len(buf)), off)
}

// PrepReadFixed prepares a read into registered buffer bufIndex; buf must lie
// inside that buffer (see [Ring.RegisterBuffers]). It works on files and on
// sockets.
func (s *SQE) PrepReadFixed(fd int, buf []byte, off uint64, bufIndex uint16) {
	s.rw(OpReadFixed, fd, bufAddr(buf), uint32(len(buf)), off)
	s.BufIndex = bufIndex
}

// PrepRecv prepares recv(2) into buf. msgFlags are MSG_* flags; rf may hold
// RecvPollFirst (5.19) so no data copy is tried before the socket is readable.
func (s *SQE) PrepRecv(fd int, buf []byte, msgFlags int, rf RecvFlags) {
	s.rw(OpRecv, fd, bufAddr(buf), uint32(len(buf)), 0)
	s.OpFlags = uint32(msgFlags)
	s.Ioprio = uint16(rf)
}

// PrepRecvMultishot prepares a multishot recv (6.0) that takes a buffer from
// provided-buffer group for every completion. Each CQE carries CQEFBuffer and
// the buffer ID; CQEFMore is clear on the last one, for example when the group
// runs dry (Res == -ENOBUFS) or the peer closes (Res == 0).
func (s *SQE) PrepRecvMultishot(fd int, group uint16, msgFlags int) {
	s.rw(OpRecv, fd, 0, 0, 0)
	s.OpFlags = uint32(msgFlags)
	s.Ioprio = uint16(RecvMultishot)
	s.Flags = SQEBufferSelect
	s.BufIndex = group
}

// PrepRecvmsg prepares recvmsg(2). msg, its iovecs, name and control buffers
// must stay valid until the CQE arrives.
func (s *SQE) PrepRecvmsg(fd int, msg *unix.Msghdr, msgFlags int) {
	s.rw(OpRecvmsg, fd, uint64(uintptr(unsafe.Pointer(msg))), 1, 0)
	s.OpFlags = uint32(msgFlags)
}

// PrepAccept prepares accept4(2). addr and addrLen may be nil; if not, they
// must stay valid until the CQE arrives. flags are SOCK_NONBLOCK and
// SOCK_CLOEXEC.
func (s *SQE) PrepAccept(fd int, addr *unix.RawSockaddrAny, addrLen *uint32, flags int) {
	s.rw(OpAccept, fd, uint64(uintptr(unsafe.Pointer(addr))), 0, uint64(uintptr(unsafe.Pointer(addrLen))))
	s.OpFlags = uint32(flags)
}

// PrepAcceptMultishot prepares a multishot accept (5.19): one CQE per
// connection, Res holding the new descriptor, until a CQE without CQEFMore.
// Peer addresses are not reported; use getpeername(2).
func (s *SQE) PrepAcceptMultishot(fd int, flags int) {
	s.PrepAccept(fd, nil, nil, flags)
	s.Ioprio = acceptMultishot
}

// PrepPollAdd prepares a one-shot poll for events (POLLIN, POLLOUT, ...).
// Res is the returned event mask.
func (s *SQE) PrepPollAdd(fd int, events uint32) {
	s.rw(OpPollAdd, fd, 0, 0, 0)
	s.OpFlags = pollMask(events)
}

// PrepPollMultishot prepares a multishot poll (5.13) that posts a CQE with
// CQEFMore each time fd becomes ready, until cancelled.
func (s *SQE) PrepPollMultishot(fd int, events uint32) {
	s.PrepPollAdd(fd, events)
	s.Len = pollAddMulti
}

// pollMask mirrors liburing __io_uring_prep_poll_mask: poll32_events is
// stored half-word swapped on big-endian hosts.
func pollMask(events uint32) uint32 {
	if bigEndian() {
		events = events<<16 | events>>16
	}
	return events
}

func bigEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 0
}

// PrepTimeout prepares a timeout that completes with Res == -ETIME when ts
// elapses, or with Res == 0 once count other completions have been posted
// (count 0 means only the time counts). ts must stay valid until submitted;
// keep it off the Go heap like all kernel-visible memory.
func (s *SQE) PrepTimeout(ts *Timespec, count uint32, flags TimeoutFlags) {
	s.rw(OpTimeout, -1, uint64(uintptr(unsafe.Pointer(ts))), 1, uint64(count))
	s.OpFlags = uint32(flags)
}

// PrepLinkTimeout prepares a timeout for the SQE before it, which must carry
// SQEIOLink (5.5). If ts elapses first, that SQE is cancelled (Res -ECANCELED)
// and this one completes with -ETIME; otherwise this one completes with
// -ECANCELED.
func (s *SQE) PrepLinkTimeout(ts *Timespec, flags TimeoutFlags) {
	s.rw(OpLinkTimeout, -1, uint64(uintptr(unsafe.Pointer(ts))), 1, 0)
	s.OpFlags = uint32(flags)
}

// PrepCancel prepares ASYNC_CANCEL of the request whose UserData is
// userData. flags may add CancelAll (every match) or CancelAny (every
// request, ignoring userData); both need 5.19. Res is 0 (or the number
// cancelled with CancelAll), -ENOENT when nothing matched, or -EALREADY when
// the request was running and could not be stopped.
func (s *SQE) PrepCancel(userData uint64, flags CancelFlags) {
	s.rw(OpAsyncCancel, -1, userData, 0, 0)
	s.OpFlags = uint32(flags)
}

// PrepCancelFd prepares ASYNC_CANCEL of requests on fd (5.19); add CancelAll
// to cancel all of them.
func (s *SQE) PrepCancelFd(fd int, flags CancelFlags) {
	s.rw(OpAsyncCancel, fd, 0, 0, 0)
	s.OpFlags = uint32(flags | CancelFd)
}

// PrepClose prepares close(2) (5.6).
func (s *SQE) PrepClose(fd int) { s.rw(OpClose, fd, 0, 0, 0) }
