package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Protocol reads and recognises PROXY headers. Its errors wrap Bad, for
// a trusted proxy's header that is missing or malformed, and Untrusted,
// for a header from a peer that is not a trusted proxy: the errors its
// caller gives (srcs.ErrProxyHeader, srcs.ErrProxyUntrusted). A Protocol
// is a value without state, safe for concurrent use.
type Protocol struct {
	Bad, Untrusted error
}

// maxV1Header is the longest v1 header, CRLF included (the spec's worst
// case "PROXY UNKNOWN ffff:...:ffff ffff:...:ffff 65535 65535\r\n").
const maxV1Header = 107

// SigLen is the length of the v2 signature; every header, v1 or v2, is at
// least this long, so it can be read before knowing which it is.
const SigLen = 12

var (
	sigV1 = []byte("PROXY ")
	sigV2 = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// ParsePrefixes parses CIDRs or single addresses, naming the YAML key in
// errors.
func ParsePrefixes(key string, list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%s[%d]: %q: not a CIDR or an IP address", key, i, s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// InPrefixes says whether a is in any of ps.
func InPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// AddrOf returns the IP of a TCP address, or the zero Addr.
func AddrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// maxV2Addresses bounds a v2 header's length field, as go-proxyproto's
// MaxV2HeaderSize does by default: the addresses and TLVs a proxy sends
// fit well within it.
const maxV2Addresses = 4096

// ReadHeader reads one PROXY header from r, and not a byte more, and
// returns it whole, for its parser (srcs/trust). An error wraps p.Bad,
// and the cause (an I/O error).
func (p Protocol) ReadHeader(r io.Reader) ([]byte, error) {
	buf := make([]byte, SigLen, 16+maxV2Addresses)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("%w: %w", p.Bad, err)
	}
	switch {
	case bytes.Equal(buf, sigV2):
		buf = buf[:16]
		if _, err := io.ReadFull(r, buf[SigLen:]); err != nil {
			return nil, fmt.Errorf("%w: v2: %w", p.Bad, err)
		}
		n := binary.BigEndian.Uint16(buf[14:16])
		if n > maxV2Addresses {
			return nil, fmt.Errorf("%w: v2: %d bytes of addresses, above %d", p.Bad, n, maxV2Addresses)
		}
		buf = buf[:16+int(n)]
		if _, err := io.ReadFull(r, buf[16:]); err != nil {
			return nil, fmt.Errorf("%w: v2: %w", p.Bad, err)
		}
	case bytes.HasPrefix(buf, sigV1):
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return nil, fmt.Errorf("%w: v1: %q is too short", p.Bad, buf[:i+1])
		}
		var one [1]byte
		for buf[len(buf)-1] != '\n' {
			if len(buf) == maxV1Header {
				return nil, fmt.Errorf("%w: v1: no line feed in %d bytes", p.Bad, maxV1Header)
			}
			if _, err := io.ReadFull(r, one[:]); err != nil {
				return nil, fmt.Errorf("%w: v1: %w", p.Bad, err)
			}
			buf = append(buf, one[0])
		}
	default:
		return nil, fmt.Errorf("%w: none at the start of the connection (first bytes %q)", p.Bad, buf)
	}
	return buf, nil
}

// sniffPoll is how often a connection whose first bytes are still a
// prefix of a PROXY signature is looked at again: readiness cannot wake
// us, since the bytes already there keep the socket readable.
const sniffPoll = 5 * time.Millisecond

// SniffConn looks at an untrusted connection's first bytes without
// consuming them, until the deadline: it fails with p.Untrusted if they
// are a PROXY signature, and returns Data once they cannot be one. A
// connection that sends nothing, or only a prefix of a signature, by the
// deadline is Maybe; so is one that ended (its end is for the
// reader to see). A connection that cannot be peeked at is Data.
func (p Protocol) SniffConn(c net.Conn, deadline time.Time) (Sniffed, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return Data, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return Maybe, err
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return Maybe, err
	}
	defer c.SetReadDeadline(time.Time{})
	var buf [SigLen]byte
	for {
		var n int
		var perr error
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, _, perr = unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
				switch perr {
				case unix.EINTR:
					continue
				case unix.EAGAIN:
					return false
				}
				return true
			}
		})
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return Maybe, nil // silent so far
		case err != nil:
			return Maybe, err
		case perr != nil:
			return Maybe, os.NewSyscallError("recvfrom", perr)
		}
		switch r := Sniff(buf[:n]); r {
		case Header:
			return r, fmt.Errorf("%w (first bytes %q)", p.Untrusted, buf[:n])
		case Data:
			return r, nil
		}
		if n == 0 || time.Now().Add(sniffPoll).After(deadline) {
			return Maybe, nil // the end of the stream, or out of time
		}
		time.Sleep(sniffPoll)
	}
}

// Sniffed is what a connection's first bytes are.
type Sniffed uint8

const (
	Data   Sniffed = iota // not a PROXY header
	Header                // a PROXY signature
	Maybe                 // a prefix of one: look again
)

// Sniff classifies a connection's first bytes.
func Sniff(b []byte) Sniffed {
	for _, sig := range [][]byte{sigV1, sigV2} {
		n := min(len(b), len(sig))
		if !bytes.Equal(b[:n], sig[:n]) {
			continue
		}
		if n == len(sig) {
			return Header
		}
		return Maybe
	}
	return Data
}
