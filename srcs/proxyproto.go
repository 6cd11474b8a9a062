package srcs

// The PROXY protocol (v1 and v2, haproxy.org's proxy-protocol.txt) on
// listeners.
//
// A header is believed only from a trusted proxy, and a trusted proxy must
// send one. sluice reads it exactly: the 12 bytes every header starts
// with, then for v2 the 4 bytes that give its length and that many, for v1
// one byte at a time up to its line feed. Nothing past the header is read,
// so a plaintext connection keeps its descriptor and the uring or epoll
// runner reads the rest from the socket; nothing is left in a user-space
// buffer that a runner would skip. go-proxyproto then parses the exact
// header bytes. A connection from any other peer is looked at with
// MSG_PEEK, which consumes nothing: if its first bytes are a PROXY
// signature it is refused (a forged header), otherwise it goes on as it
// is. A peer whose first bytes are not there within sniffGrace is not
// held for the handshake timeout: it becomes a source at once, and its
// Read checks the first bytes whenever they come (see firstBytes), so a
// header sent late is refused too.

import (
	"bufio"
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

	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/sys/unix"
)

// ProxyProtocolConfig enables the PROXY protocol on a listener.
type ProxyProtocolConfig struct {
	// Trusted lists the proxies (CIDRs such as "10.0.0.0/8", or single
	// addresses) whose PROXY headers are believed. Each must send a v1 or
	// v2 header first on every connection; a connection from one that
	// does not is refused. A connection from any other address whose
	// first bytes are a header is refused too, however late they come.
	// Required.
	Trusted []string `yaml:"trusted"`
}

// Errors of the PROXY protocol, wrapped in a listener's refusals.
var (
	// ErrProxyHeader is a trusted proxy's header that is missing or
	// malformed.
	ErrProxyHeader = errors.New("srcs: bad PROXY header")
	// ErrProxyUntrusted is a PROXY header from an address that is not a
	// trusted proxy.
	ErrProxyUntrusted = errors.New("srcs: PROXY header from an untrusted address")
)

// maxV1Header is the longest v1 header, CRLF included (the spec's worst
// case "PROXY UNKNOWN ffff:...:ffff ffff:...:ffff 65535 65535\r\n").
const maxV1Header = 107

// sigLen is the length of the v2 signature; every header, v1 or v2, is at
// least this long, so it can be read before knowing which it is.
const sigLen = 12

var (
	sigV1 = []byte("PROXY ")
	sigV2 = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

// parsePrefixes parses CIDRs or single addresses, naming the YAML key in
// errors.
func parsePrefixes(key string, list []string) ([]netip.Prefix, error) {
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

// inPrefixes says whether a is in any of ps.
func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// addrOf returns the IP of a TCP address, or the zero Addr.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// readProxyHeader reads one PROXY header from r, and not a byte more, and
// parses it. An error wraps ErrProxyHeader, and the cause (an I/O error, a
// go-proxyproto error).
func readProxyHeader(r io.Reader) (*proxyproto.Header, error) {
	buf := make([]byte, sigLen, 16+int(proxyproto.MaxV2HeaderSize))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProxyHeader, err)
	}
	switch {
	case bytes.Equal(buf, sigV2):
		buf = buf[:16]
		if _, err := io.ReadFull(r, buf[sigLen:]); err != nil {
			return nil, fmt.Errorf("%w: v2: %w", ErrProxyHeader, err)
		}
		n := binary.BigEndian.Uint16(buf[14:16])
		if n > proxyproto.MaxV2HeaderSize {
			return nil, fmt.Errorf("%w: v2: %d bytes of addresses, above %d", ErrProxyHeader, n, proxyproto.MaxV2HeaderSize)
		}
		buf = buf[:16+int(n)]
		if _, err := io.ReadFull(r, buf[16:]); err != nil {
			return nil, fmt.Errorf("%w: v2: %w", ErrProxyHeader, err)
		}
	case bytes.HasPrefix(buf, sigV1):
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return nil, fmt.Errorf("%w: v1: %q is too short", ErrProxyHeader, buf[:i+1])
		}
		var one [1]byte
		for buf[len(buf)-1] != '\n' {
			if len(buf) == maxV1Header {
				return nil, fmt.Errorf("%w: v1: no line feed in %d bytes", ErrProxyHeader, maxV1Header)
			}
			if _, err := io.ReadFull(r, one[:]); err != nil {
				return nil, fmt.Errorf("%w: v1: %w", ErrProxyHeader, err)
			}
			buf = append(buf, one[0])
		}
	default:
		return nil, fmt.Errorf("%w: none at the start of the connection (first bytes %q)", ErrProxyHeader, buf)
	}
	h, err := proxyproto.Read(bufio.NewReaderSize(bytes.NewReader(buf), len(buf)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProxyHeader, err)
	}
	return h, nil
}

// proxiedAddr returns the original client's address from a header, or
// nil when the header names none (a LOCAL command, such as a proxy's
// health check, or an UNKNOWN family): the connection then stands for the
// proxy itself.
func proxiedAddr(h *proxyproto.Header) *net.TCPAddr {
	if !h.Command.IsProxy() {
		return nil
	}
	src, _, ok := h.TCPAddrs()
	if !ok {
		return nil
	}
	return src
}

// sniffPoll is how often a connection whose first bytes are still a
// prefix of a PROXY signature is looked at again: readiness cannot wake
// us, since the bytes already there keep the socket readable.
const sniffPoll = 5 * time.Millisecond

// sniffGrace is how long a plaintext listener looks at an untrusted
// connection's first bytes before it hands the connection over anyway,
// with a guard on its Read (see firstBytes): a client that writes as soon
// as it connects is decided here and keeps its descriptor for the uring
// or epoll runner, and one that stays silent is not held for the whole
// handshake timeout.
const sniffGrace = 50 * time.Millisecond

// sniffProxyHeader looks at an untrusted connection's first bytes without
// consuming them, until the deadline: it fails with ErrProxyUntrusted if
// they are a PROXY signature, and returns sniffData once they cannot be
// one. A connection that sends nothing, or only a prefix of a signature,
// by the deadline is sniffMaybe; so is one that ended (its end is for the
// reader to see). A connection that cannot be peeked at is sniffData.
func sniffProxyHeader(c net.Conn, deadline time.Time) (sniffResult, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return sniffData, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return sniffMaybe, err
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return sniffMaybe, err
	}
	defer c.SetReadDeadline(time.Time{})
	var buf [sigLen]byte
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
			return sniffMaybe, nil // silent so far
		case err != nil:
			return sniffMaybe, err
		case perr != nil:
			return sniffMaybe, os.NewSyscallError("recvfrom", perr)
		}
		switch r := sniff(buf[:n]); r {
		case sniffHeader:
			return r, fmt.Errorf("%w (first bytes %q)", ErrProxyUntrusted, buf[:n])
		case sniffData:
			return r, nil
		}
		if n == 0 || time.Now().Add(sniffPoll).After(deadline) {
			return sniffMaybe, nil // the end of the stream, or out of time
		}
		time.Sleep(sniffPoll)
	}
}

// firstBytes guards the Read of an untrusted connection whose first
// bytes were not there when its listener looked (see sniffGrace): until
// they show that the connection does not start with a PROXY signature,
// Read takes them into head, a few at a time, and delivers nothing; a
// signature fails Read with ErrProxyUntrusted, and the listener counts
// the refusal. Because the check lives in Read, such a connection is
// Encrypted (read through Read on the goroutine runner) and has no
// descriptor to give. Only Read touches it.
type firstBytes struct {
	peer    net.Addr
	head    []byte // bytes read and not yet delivered, at most sigLen
	decided bool   // the first bytes are data: Read goes straight through
}

// read is acceptedConn.Read while the first bytes are undecided.
func (g *firstBytes) read(c *acceptedConn, p []byte) (int, error) {
	for {
		switch sniff(g.head) {
		case sniffHeader:
			err := fmt.Errorf("%w (first bytes %q)", ErrProxyUntrusted, g.head)
			c.l.refuse(refProxy, g.peer, err)
			return 0, fmt.Errorf("srcs: %s: %w", c.Name(), err)
		case sniffData:
			if len(g.head) > 0 {
				n := copy(p, g.head)
				g.head = g.head[n:]
				g.decided = len(g.head) == 0
				return n, nil
			}
		}
		var b [sigLen]byte
		m, err := c.Conn.Read(b[:sigLen-len(g.head)])
		g.head = append(g.head, b[:m]...)
		if err == nil {
			continue
		}
		if sniff(g.head) == sniffHeader {
			continue // refused above
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, err // keep head: the runner's flush or stop deadline
		}
		// The end of the stream, or an error: what came is data.
		n := copy(p, g.head)
		g.head = g.head[n:]
		g.decided = len(g.head) == 0
		return n, err
	}
}

type sniffResult uint8

const (
	sniffData   sniffResult = iota // not a PROXY header
	sniffHeader                    // a PROXY signature
	sniffMaybe                     // a prefix of one: look again
)

// sniff classifies a connection's first bytes.
func sniff(b []byte) sniffResult {
	for _, sig := range [][]byte{sigV1, sigV2} {
		n := min(len(b), len(sig))
		if !bytes.Equal(b[:n], sig[:n]) {
			continue
		}
		if n == len(sig) {
			return sniffHeader
		}
		return sniffMaybe
	}
	return sniffData
}
