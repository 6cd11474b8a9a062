package uring

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peer decodes the peer address an accept wrote into sa, n bytes of it:
// an IP address and port (an IPv4-mapped IPv6 address unmapped), or a unix
// socket's path ("@name" for an abstract name; empty for an unbound peer).
func Peer(sa *unix.RawSockaddrAny, n uint32) (netip.AddrPort, string) {
	if n < 2 {
		return netip.AddrPort{}, ""
	}
	switch sa.Addr.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), ntohs(p.Port)), ""
	case unix.AF_INET6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom16(p.Addr).Unmap(), ntohs(p.Port)), ""
	case unix.AF_UNIX:
		p := (*unix.RawSockaddrUnix)(unsafe.Pointer(sa))
		l := min(int(n)-2, len(p.Path))
		if l <= 0 {
			return netip.AddrPort{}, ""
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&p.Path[0])), l)
		if b[0] == 0 {
			// An abstract name: its first byte is NUL, written "@".
			return netip.AddrPort{}, "@" + string(trimNUL(b[1:]))
		}
		return netip.AddrPort{}, string(trimNUL(b))
	}
	return netip.AddrPort{}, ""
}

func ntohs(p uint16) uint16 { return p>>8 | p<<8 }

// trimNUL cuts b at its first NUL.
func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
