package srcs

// A listener's trust: the allow-list checked at accept, and the handshake
// (PROXY header, TLS) every connection must finish before AcceptSource returns
// it.
//
// Handshakes run in the background, one goroutine each, so a slow or
// hostile peer never holds up Accept or the connections behind it. Each
// holds its slot under MaxConns and one of MaxHandshakes, and no buffer: a
// connection reaches the engine, and takes pool buffers, only once its
// handshake is done. Each has HandshakeTimeout as its deadline, and
// Listener.Close cuts those in progress, so a peer that never finishes
// its handshake costs a goroutine and a descriptor for HandshakeTimeout at
// most.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/wire/proxy"
	"github.com/sluice-io/sluice/internal/wire/trusthook"
)

// DefaultMaxHandshakes caps a listener's handshakes in progress when
// MaxHandshakes is zero.
const DefaultMaxHandshakes = 1024

// trust is a listener's checked trust configuration.
type trust struct {
	allow, trusted []netip.Prefix
	tls            trusthook.Handshake
	// proxy parses the trusted proxies' headers; set with trusted.
	proxy trusthook.Provider
}

// CheckTrust checks the form of cfg's trust fields (handshake_timeout,
// max_handshakes, allow, proxy_protocol) as ListenTCP would, without
// listening or reading a file, so that a node file can be checked before
// anything opens. Errors name the YAML keys (allow[1]: ...).
func (cfg ListenerConfig) CheckTrust() error {
	_, err := trustForm(cfg)
	return err
}

// trustForm checks and parses the trust fields that need no file.
func trustForm(cfg ListenerConfig) (trust, error) {
	var t trust
	var err error
	switch {
	case cfg.HandshakeTimeout < 0:
		return t, fmt.Errorf("handshake_timeout: %v is negative", cfg.HandshakeTimeout)
	case cfg.MaxHandshakes < 0:
		return t, fmt.Errorf("max_handshakes: %d is negative", cfg.MaxHandshakes)
	}
	if len(cfg.Allow) > 0 {
		if t.allow, err = proxy.ParsePrefixes("allow", cfg.Allow); err != nil {
			return t, err
		}
	}
	if cfg.ProxyProtocol != nil {
		if len(cfg.ProxyProtocol.Trusted) == 0 {
			return t, errors.New("proxy_protocol.trusted: no proxy address: a header from anyone else is refused")
		}
		if t.trusted, err = proxy.ParsePrefixes("proxy_protocol.trusted", cfg.ProxyProtocol.Trusted); err != nil {
			return t, err
		}
	}
	return t, nil
}

// newTrust checks the trust fields of cfg. Errors name the YAML keys.
func newTrust(cfg ListenerConfig) (trust, error) {
	t, err := trustForm(cfg)
	if err != nil {
		return t, err
	}
	if cfg.TLS != nil {
		if t.tls, err = cfg.TLS.server(cfg.Logger); err != nil {
			return t, err
		}
	}
	if t.trusted != nil {
		if t.proxy = trusthook.Get(); t.proxy == nil {
			return t, errNoTrust("proxy_protocol")
		}
	}
	return t, nil
}

// checkNoTrust fails for trust fields on a listener that cannot use them.
func checkNoTrust(cfg ListenerConfig) error {
	switch {
	case cfg.TLS != nil:
		return errors.New("tls: for TCP listeners only")
	case cfg.ProxyProtocol != nil:
		return errors.New("proxy_protocol: for TCP listeners only")
	case len(cfg.Allow) > 0:
		return errors.New("allow: for TCP listeners only")
	}
	return nil
}

// Why a listener refused a connection.
type refusal uint8

const (
	refDenied refusal = iota
	refProxy
	refTimeout
	refTLS
	refCert
	refClosed // the listener closed during the handshake: not counted
	nRefusals
)

var refusalNames = [nRefusals]string{
	refDenied:  "address not allowed",
	refProxy:   "PROXY header refused",
	refTimeout: "handshake timed out",
	refTLS:     "TLS handshake failed",
	refCert:    "client certificate rejected",
	refClosed:  "listener closed",
}

// ListenerStats counts a listener's connections over its life.
type ListenerStats struct {
	// Accepted counts connections Accept returned.
	Accepted uint64
	// Denied counts connections closed at accept because their address
	// (or the original client's, behind a trusted proxy) is not in Allow.
	Denied uint64
	// ProxyRefused counts connections refused over the PROXY protocol: a
	// trusted proxy's header missing or malformed, or a header from an
	// untrusted address.
	ProxyRefused uint64
	// HandshakeTimeouts counts handshakes not finished within
	// HandshakeTimeout.
	HandshakeTimeouts uint64
	// TLSFailures counts TLS handshakes that failed for other reasons than
	// the client's certificate: plaintext or garbage instead of a
	// ClientHello, no common version or cipher suite, an alert from the
	// client.
	TLSFailures uint64
	// CertRejected counts clients whose certificate was missing (with
	// client_auth require) or not signed by ca_file.
	CertRejected uint64
}

type listenerCounters struct {
	accepted atomic.Uint64
	refused  [nRefusals]atomic.Uint64
	// warned is when each kind of refusal was last logged at Warn (unix
	// nanoseconds): once a minute at most, the rest at Debug, so a flood
	// of hostile peers cannot flood the log.
	warned [nRefusals]atomic.Int64
}

// Stats returns the listener's counters. It is safe for concurrent use.
func (l *Listener) Stats() ListenerStats {
	c := &l.counters
	return ListenerStats{
		Accepted:          c.accepted.Load(),
		Denied:            c.refused[refDenied].Load(),
		ProxyRefused:      c.refused[refProxy].Load(),
		HandshakeTimeouts: c.refused[refTimeout].Load(),
		TLSFailures:       c.refused[refTLS].Load(),
		CertRejected:      c.refused[refCert].Load(),
	}
}

// refuse counts and logs a refused connection. The caller closes it.
func (l *Listener) refuse(why refusal, peer net.Addr, err error) {
	if why == refClosed {
		return
	}
	l.counters.refused[why].Add(1)
	level, now := contract.LevelDebug, time.Now().UnixNano()
	w := &l.counters.warned[why]
	if last := w.Load(); now-last > int64(shortageQuiet) && w.CompareAndSwap(last, now) {
		level = contract.LevelWarn
	}
	contract.Log(l.log, level, "srcs: connection refused (further ones for this reason within a minute are logged at debug)",
		"listener", l.name, "peer", peer.String(), "reason", refusalNames[why], "err", err)
}

// admit applies the allow-list to a new connection's peer. A connection
// it refuses is closed and counted.
func (l *Listener) admit(c net.Conn) bool {
	if l.allow == nil {
		return true
	}
	a := proxy.AddrOf(c.RemoteAddr())
	if proxy.InPrefixes(l.allow, a) || (l.trusted != nil && proxy.InPrefixes(l.trusted, a)) {
		return true
	}
	l.refuse(refDenied, c.RemoteAddr(), fmt.Errorf("%s is not in allow", a))
	c.Close()
	return false
}

// handshaker accepts and handshakes a listener's connections in the
// background. It is safe for concurrent use.
type handshaker struct {
	tls     trusthook.Handshake
	proxy   trusthook.Provider
	timeout time.Duration
	sem     chan struct{} // one token per handshake in progress

	ctx    context.Context // cancelled by close: cuts every handshake
	cancel context.CancelFunc
	ready  chan *acceptedConn // handshaken connections, for Accept
	failed chan struct{}      // closed when the accept loop stops on an error
	err    error              // why; set before failed is closed

	mu      sync.Mutex // guards started and closed against wg
	started bool
	closed  bool
	wg      sync.WaitGroup // the accept loop and the handshakes
}

func newHandshaker(t trust, cfg ListenerConfig) *handshaker {
	h := &handshaker{
		tls:     t.tls,
		proxy:   t.proxy,
		timeout: cfg.HandshakeTimeout,
		sem:     make(chan struct{}, orDefault(cfg.MaxHandshakes, DefaultMaxHandshakes)),
		ready:   make(chan *acceptedConn),
		failed:  make(chan struct{}),
	}
	if h.timeout == 0 {
		h.timeout = DefaultHandshakeTimeout
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// close cuts the handshakes and waits for every goroutine.
func (h *handshaker) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// acceptReady is Accept for a listener that handshakes: it starts the
// accept loop on first use and returns the next handshaken connection.
func (l *Listener) acceptReady(ctx context.Context) (*acceptedConn, error) {
	h := l.hs
	h.mu.Lock()
	if !h.started && !h.closed {
		h.started = true
		h.wg.Go(l.acceptLoop)
	}
	h.mu.Unlock()
	select {
	case c := <-h.ready:
		l.counters.accepted.Add(1)
		l.opened()
		return c, nil
	case <-h.failed:
		return nil, h.err
	case <-ctx.Done():
		return nil, l.errorf(context.Cause(ctx))
	case <-l.done:
		return nil, l.errorf(net.ErrClosed)
	}
}

// acceptLoop accepts connections while there are slots under MaxConns and
// MaxHandshakes, and starts a handshake for each. It stops at Close, or on
// an accept error, which Accept then returns.
func (l *Listener) acceptLoop() {
	h := l.hs
	for {
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
			case <-l.done:
				return
			}
		}
		select {
		case h.sem <- struct{}{}:
		case <-l.done:
			l.releaseSlot()
			return
		}
		c, err := l.accept(h.ctx)
		if err != nil {
			<-h.sem
			l.releaseSlot()
			select {
			case <-l.done:
			default:
				h.err = err
				close(h.failed)
			}
			return
		}
		h.wg.Go(func() { l.handshake(c) })
	}
}

// releaseSlot gives back a slot under MaxConns taken for a connection
// that never reached AcceptSource's caller.
func (l *Listener) releaseSlot() {
	if l.slots != nil {
		<-l.slots
	}
}

// handshake runs one connection's handshake and hands the connection to
// Accept, or refuses it.
func (l *Listener) handshake(c net.Conn) {
	h := l.hs
	deadline := time.Now().Add(h.timeout)
	c.SetDeadline(deadline)
	stop := context.AfterFunc(h.ctx, func() { c.Close() })
	ac, why, err := l.prepare(c, deadline)
	if !stop() && err == nil {
		why, err = refClosed, net.ErrClosed
	}
	// The token is held until Accept takes the connection, so that
	// MaxHandshakes also bounds those waiting for a slow Accept.
	defer func() { <-h.sem }()
	if err == nil {
		err = c.SetDeadline(time.Time{})
		if err != nil {
			why = refClosed
		}
	}
	if err != nil {
		l.refuse(why, c.RemoteAddr(), err)
		c.Close()
		l.release()
		return
	}
	select {
	case h.ready <- ac:
	case <-l.done:
		ac.Close()
	}
}

// prepare reads a trusted proxy's PROXY header (or checks that an
// untrusted peer sends none), then runs the TLS handshake, and returns the
// connection as a source named for its original client.
func (l *Listener) prepare(c net.Conn, deadline time.Time) (*acceptedConn, refusal, error) {
	h := l.hs
	name := "tcp://" + c.RemoteAddr().String()
	if l.trusted != nil {
		if proxy.InPrefixes(l.trusted, proxy.AddrOf(c.RemoteAddr())) {
			hdr, err := proxyProtocol().ReadHeader(c)
			if err != nil {
				return nil, classifyHandshake(err, refProxy), err
			}
			src, err := h.proxy.ProxyAddr(hdr)
			if err != nil {
				err = fmt.Errorf("%w: %w", ErrProxyHeader, err)
				return nil, refProxy, err
			}
			if src != nil {
				if l.allow != nil && !proxy.InPrefixes(l.allow, proxy.AddrOf(src)) {
					return nil, refDenied, fmt.Errorf("%s (behind proxy %s) is not in allow", src, c.RemoteAddr())
				}
				name = "tcp://" + src.String()
			}
		} else {
			// A TLS handshake waits for the client's first bytes anyway;
			// a plaintext connection is looked at only briefly, then
			// becomes a source whose Read checks its first bytes.
			until := deadline
			if grace := time.Now().Add(sniffGrace); h.tls == nil && grace.Before(deadline) {
				until = grace
			}
			res, err := proxyProtocol().SniffConn(c, until)
			if err != nil {
				return nil, classifyHandshake(err, refProxy), err
			}
			if res == proxy.Maybe && h.tls == nil {
				return &acceptedConn{Conn: newConn(c, name), l: l, guard: &firstBytes{peer: c.RemoteAddr()}}, 0, nil
			}
		}
	}
	if h.tls == nil {
		return &acceptedConn{Conn: newConn(c, name), l: l}, 0, nil
	}
	sess, id, err := h.tls.Run(h.ctx, c)
	if err != nil {
		return nil, classifyHandshake(err, refTLS), fmt.Errorf("tls: %w", err)
	}
	return &acceptedConn{Conn: newTLSConn(sess, c, id, "tls://"+strings.TrimPrefix(name, "tcp://")), l: l}, 0, nil
}

// classifyHandshake tells a timeout, a closed listener and a rejected
// client certificate from other failures of the given kind.
func classifyHandshake(err error, kind refusal) refusal {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refTimeout
	case errors.Is(err, net.ErrClosed):
		return refClosed
	case errors.Is(err, trusthook.ErrCertRejected):
		return refCert
	}
	return kind
}
