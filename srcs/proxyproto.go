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
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sluice-io/sluice/internal/wire/proxy"
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

// proxyProtocol reads and recognises PROXY headers; its errors wrap
// ErrProxyHeader and ErrProxyUntrusted.
func proxyProtocol() proxy.Protocol {
	return proxy.Protocol{Bad: ErrProxyHeader, Untrusted: ErrProxyUntrusted}
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

// sniffGrace is how long a plaintext listener looks at an untrusted
// connection's first bytes before it hands the connection over anyway,
// with a guard on its Read (see firstBytes): a client that writes as soon
// as it connects is decided here and keeps its descriptor for the uring
// or epoll runner, and one that stays silent is not held for the whole
// handshake timeout.
const sniffGrace = 50 * time.Millisecond

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
	head    []byte // bytes read and not yet delivered, at most proxy.SigLen
	decided bool   // the first bytes are data: Read goes straight through
}

// read is acceptedConn.Read while the first bytes are undecided.
func (g *firstBytes) read(c *acceptedConn, p []byte) (int, error) {
	for {
		switch proxy.Sniff(g.head) {
		case proxy.Header:
			err := fmt.Errorf("%w (first bytes %q)", ErrProxyUntrusted, g.head)
			c.l.refuse(refProxy, g.peer, err)
			return 0, fmt.Errorf("srcs: %s: %w", c.Name(), err)
		case proxy.Data:
			if len(g.head) > 0 {
				n := copy(p, g.head)
				g.head = g.head[n:]
				g.decided = len(g.head) == 0
				return n, nil
			}
		}
		var b [proxy.SigLen]byte
		m, err := c.Conn.Read(b[:proxy.SigLen-len(g.head)])
		g.head = append(g.head, b[:m]...)
		if err == nil {
			continue
		}
		if proxy.Sniff(g.head) == proxy.Header {
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
