package uring

import (
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPeer checks the decoding of the addresses an accept writes: TCP
// over IPv4 and IPv6 (a mapped IPv4 address unmapped), a unix peer bound
// to a path or an abstract name, and one bound to nothing.
func TestPeer(t *testing.T) {
	var raw unix.RawSockaddrAny
	in4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&raw))
	*in4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: 0x3930, Addr: [4]byte{127, 0, 0, 9}} // port 12345, network order
	if ap, path := Peer(&raw, unix.SizeofSockaddrInet4); ap != netip.MustParseAddrPort("127.0.0.9:12345") || path != "" {
		t.Errorf("inet4: %v %q", ap, path)
	}
	raw = unix.RawSockaddrAny{}
	in6 := (*unix.RawSockaddrInet6)(unsafe.Pointer(&raw))
	*in6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Port: 0x5000, Addr: netip.MustParseAddr("::ffff:10.1.2.3").As16()}
	if ap, _ := Peer(&raw, unix.SizeofSockaddrInet6); ap != netip.MustParseAddrPort("10.1.2.3:80") {
		t.Errorf("inet6 mapped: %v", ap)
	}
	for _, tc := range []struct {
		name string
		want string
	}{{"/run/x.sock", "/run/x.sock"}, {"\x00sluice", "@sluice"}, {"", ""}} {
		raw = unix.RawSockaddrAny{}
		un := (*unix.RawSockaddrUnix)(unsafe.Pointer(&raw))
		un.Family = unix.AF_UNIX
		for i := range len(tc.name) {
			un.Path[i] = int8(tc.name[i])
		}
		n := uint32(2 + len(tc.name))
		if tc.name != "" && tc.name[0] != 0 {
			n++ // a path's NUL
		}
		if ap, path := Peer(&raw, n); ap.IsValid() || path != tc.want {
			t.Errorf("unix %q: %v %q, want %q", tc.name, ap, path, tc.want)
		}
	}
	if ap, path := Peer(&raw, 0); ap.IsValid() || path != "" {
		t.Errorf("no address: %v %q", ap, path)
	}
}
