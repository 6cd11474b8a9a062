package srcs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
)

// Bounds of the back-off after accept(2) fails for lack of resources.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// shortageQuiet is how long accept(2) must go without failing for lack of
// resources before a listener counts the next failure as a new shortage,
// which it logs at Warn; failures within a shortage are logged at Debug.
// Under a steady shortage every freed descriptor lets one connection in
// and the next accept fails again, so a warning per failure would flood
// the log.
const shortageQuiet = time.Minute

// ListenerConfig configures ListenTCP and ListenUnix.
type ListenerConfig struct {
	// MaxConns caps the connections accepted and not yet closed. At the
	// cap, Accept stops calling accept(2), so further clients wait in the
	// kernel's backlog and then get no SYN-ACK. Zero means no cap.
	MaxConns int `yaml:"max_conns"`
	// ReusePort sets SO_REUSEPORT on a TCP listener before it binds, so
	// that several processes (ingest nodes) can listen on one port and
	// the kernel spreads new connections among them. Every socket sharing
	// the port must set it, under the same user. ListenUnix ignores it.
	ReusePort bool `yaml:"reuse_port"`
	// RecvBuffer sets SO_RCVBUF on a TCP listener before it listens, so
	// that every accepted connection starts with a receive buffer of
	// this many bytes (the kernel doubles it for its bookkeeping, and
	// net.core.rmem_max caps it) and can advertise a window that large.
	// A connection with a set buffer is no longer autotuned. Negative
	// leaves every connection to the kernel's autotuning, which starts
	// from net.ipv4.tcp_rmem's default (128 KiB on most systems). Zero,
	// the default, leaves the first connections to the autotuning too,
	// but once the listener holds 16 connections at once, the ones it
	// accepts from then on get 256 KiB: hundreds of busy autotuned
	// connections together exhaust the kernel's TCP memory, which then
	// costs every byte more (see docs/decisions/0023-receive-buffers.md).
	// A window of 256 KiB carries about 25 MB/s per connection over a
	// round trip of 10 ms: a listener for a few long-distance bulk
	// streams wants a larger buffer, or -1. ListenUnix ignores it.
	//
	// Many busy senders into small receive buffers can lock an engine on
	// loopback into doing the senders' transmit work: each read that
	// reopens a closed window sends an ACK whose processing transmits
	// the sender's queued data from the reader's CPU. See
	// docs/decisions/0010-bulk-row-on-loopback.md.
	RecvBuffer int `yaml:"recv_buffer"`
	// TLS, when set, makes every accepted connection a TLS session
	// (TLS 1.2 or 1.3), optionally verifying client certificates. A TLS
	// source is read on the goroutine runner, which decrypts into pool
	// buffers; see TLSConfig. TCP listeners only.
	TLS *TLSConfig `yaml:"tls"`
	// ProxyProtocol, when set, reads a PROXY protocol header (v1 or v2)
	// from the trusted proxies, and names their connections by the
	// original client's address. TCP listeners only.
	ProxyProtocol *ProxyProtocolConfig `yaml:"proxy_protocol"`
	// Allow lists the networks (CIDRs, or single addresses) allowed to
	// connect; a connection from any other address is closed at accept
	// and counted (ListenerStats.Denied). Trusted proxies may always
	// connect, and the original client a proxy names must be allowed.
	// Empty allows every address. TCP listeners only.
	Allow []string `yaml:"allow"`
	// HandshakeTimeout bounds the PROXY header and the TLS handshake of
	// one connection, so that a peer that never finishes holds nothing
	// for longer. Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// MaxHandshakes caps the connections in their handshake, or
	// handshaken and waiting for Accept, at once; past it the listener
	// accepts no more until one is done. Default DefaultMaxHandshakes.
	MaxHandshakes int `yaml:"max_handshakes"`
	// Framer frames every accepted connection into records (see Framer);
	// nil delivers raw bytes. See ParseFraming.
	Framer Framer `yaml:"-"`
	// Logger receives accept trouble (descriptors exhausted). Nil
	// discards.
	Logger Logger `yaml:"-"`
}

// Listener accepts stream connections (TCP, or unix with ListenUnix) as
// sources, capped by ListenerConfig.MaxConns and resilient to descriptor
// exhaustion.
//
// Accept, Addr and Close are safe for concurrent use; concurrent Accepts
// take turns. Closing the listener does not close the connections it
// accepted: each acceptedConn belongs to whoever Accept returned it to.
type Listener struct {
	ln streamListener
	// rawf is a duplicate of ln's socket on Go's netpoller, which
	// AcceptDescriptor accepts on (Linux); nil where it is not used.
	rawf   *os.File
	name   string
	log    Logger
	framer Framer

	// slots holds one token per open accepted connection; nil if
	// unlimited. Accept sends before accept(2), acceptedConn.Close
	// receives.
	slots chan struct{}
	// freed is signalled (coalescing) when an accepted connection
	// closes, to cut an EMFILE back-off short: its descriptor is free.
	freed chan struct{}
	// turn serialises Accept, because cancelling one Accept moves the
	// listener's deadline, which all of them share.
	turn chan struct{}
	// lastShort is when accept(2) last failed for lack of resources.
	// Guarded by turn.
	lastShort time.Time

	// allow and trusted are the parsed Allow and ProxyProtocol.Trusted;
	// nil when not configured.
	allow, trusted []netip.Prefix
	// hs handshakes connections (PROXY header, TLS) before AcceptSource returns
	// them; nil when the listener has neither.
	hs *handshaker

	counters listenerCounters
	recv     recvAuto // RecvBuffer zero: the buffer set once many connections are open

	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// streamListener is what Listener needs of a *net.TCPListener or a
// *net.UnixListener: accept(2) on the Go netpoller, and a deadline to wake
// a blocked Accept for a context.
type streamListener interface {
	net.Listener
	SetDeadline(t time.Time) error
}

// ListenTCP listens on addr ("host:port"; "127.0.0.1:0" and "[::1]:0"
// pick a free port).
func ListenTCP(addr string, cfg ListenerConfig) (*Listener, error) {
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("srcs: listen tcp: MaxConns: %d is negative", cfg.MaxConns)
	}
	t, err := newTrust(cfg)
	if err != nil {
		return nil, fmt.Errorf("srcs: listen tcp %s: %w", addr, err)
	}
	var lc net.ListenConfig
	lc.Control = listenControl(cfg)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, &listenError{"tcp", addr, err}
	}
	l := newListener(ln.(*net.TCPListener), "tcp://"+ln.Addr().String(), cfg)
	l.recv.on = cfg.RecvBuffer == 0 && autoRecvSupported
	if l.rawf != nil {
		if err := setKeepAlive(l.rawf); err != nil {
			l.Close()
			return nil, fmt.Errorf("srcs: listen tcp %s: keepalive: %w", addr, err)
		}
	}
	l.allow, l.trusted = t.allow, t.trusted
	if t.tls != nil || t.trusted != nil {
		l.hs = newHandshaker(t, cfg)
	}
	return l, nil
}

// listenError is a listen that failed, named once: "srcs: listen tcp
// 127.0.0.1:99999: invalid port", where the *net.OpError inside would
// repeat the operation and the address ("listen tcp: address 99999:
// invalid port"). Unwrap gives that error whole.
type listenError struct {
	network, addr string
	err           error
}

func (e *listenError) Error() string {
	msg := e.err.Error()
	var op *net.OpError
	var ae *net.AddrError
	switch {
	case errors.As(e.err, &ae):
		msg = ae.Err // the address is in the message already
	case errors.As(e.err, &op) && op.Err != nil:
		msg = op.Err.Error()
	}
	return "srcs: listen " + e.network + " " + e.addr + ": " + msg
}

func (e *listenError) Unwrap() error { return e.err }

// newListener wraps a listening socket; cfg has been checked.
func newListener(ln streamListener, name string, cfg ListenerConfig) *Listener {
	l := &Listener{
		ln:     ln,
		rawf:   rawListener(ln),
		name:   name,
		log:    cfg.Logger,
		framer: cfg.Framer,
		freed:  make(chan struct{}, 1),
		turn:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	if l.log == nil {
		l.log = contract.Discard{}
	}
	if cfg.MaxConns > 0 {
		l.slots = make(chan struct{}, cfg.MaxConns)
	}
	return l
}

// Framer implements Framed: ListenerConfig.Framer, which frames each of
// the listener's connections.
func (l *Listener) Framer() Framer { return l.framer }

var _ Framed = (*Listener)(nil)

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// acceptConn is AcceptSource's accept, returning the connection's own type.
func (l *Listener) acceptConn(ctx context.Context) (*acceptedConn, error) {
	if l.hs != nil {
		return l.acceptReady(ctx)
	}
	var c net.Conn
	if err := l.takeTurn(ctx, func() (err error) {
		c, err = l.accept(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	return &acceptedConn{Conn: NewConn(c), l: l}, nil
}

// takeTurn waits for AcceptSource's turn, then for a free slot under MaxConns,
// and runs accept, which takes the slot when it succeeds.
func (l *Listener) takeTurn(ctx context.Context, accept func() error) error {
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return l.errorf(context.Cause(ctx))
	case <-l.done:
		return l.errorf(net.ErrClosed)
	}
	defer func() { <-l.turn }()

	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return l.errorf(context.Cause(ctx))
		case <-l.done:
			return l.errorf(net.ErrClosed)
		}
	}
	if err := accept(); err != nil {
		if l.slots != nil {
			<-l.slots
		}
		return err
	}
	l.counters.accepted.Add(1)
	l.opened()
	return nil
}

// AcceptSource waits for a free slot under MaxConns, then for a connection, and
// returns it open. It returns an error wrapping net.ErrClosed after Close,
// and ctx's error when ctx ends first. When accept(2) fails for lack of
// descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), it backs
// off from 5ms doubling to 1s and tries again; an accepted connection
// closing ends the back-off at once. It logs the first failure of a
// shortage at Warn and the rest of it at Debug. Other accept
// errors are returned.
//
// On a listener with TLS or the PROXY protocol, connections are accepted
// and handshaken in the background, several at once, each within
// HandshakeTimeout, and AcceptSource returns those whose handshake succeeded;
// the others are closed, counted and logged (see Stats).
//
// engine.Engine.AddListener calls it, unless its runner accepts on its
// own loops; a program that adds each connection itself may call it too.
func (l *Listener) AcceptSource(ctx context.Context) (Source, error) {
	c, err := l.acceptConn(ctx)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (l *Listener) errorf(err error) error {
	return fmt.Errorf("srcs: accept %s: %w", l.name, err)
}

// accept calls accept(2) until it yields a connection or a lasting error.
func (l *Listener) accept(ctx context.Context) (net.Conn, error) {
	var c net.Conn
	err := l.retryAccept(ctx, l.ln.SetDeadline, func() (bool, error) {
		var err error
		if c, err = l.ln.Accept(); err != nil {
			return false, err
		}
		return l.admit(c), nil
	})
	return c, err
}

// retryAccept calls once, one accept(2) and the admission of what it
// accepted, until once reports a connection it admitted (true) or a
// lasting error, backing off while accept fails for lack of resources
// (see Accept). once may return false and no error for a connection it
// refused, or a failure worth retrying at once. setDeadline is the
// deadline of the descriptor once waits on.
func (l *Listener) retryAccept(ctx context.Context, setDeadline func(time.Time) error, once func() (bool, error)) error {
	// A deadline in the past is how a blocked Accept is woken for ctx.
	// Before returning, wait for that callback if it started, then clear
	// the deadline, so that the next Accept does not inherit it.
	woken := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		setDeadline(time.Unix(1, 0))
		close(woken)
	})
	defer func() {
		if !stop() {
			<-woken
		}
		setDeadline(time.Time{})
	}()

	var delay time.Duration
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ok, err := once()
		if ok {
			return nil
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			return l.errorf(context.Cause(ctx))
		}
		if !exhausted(err) {
			return l.errorf(err)
		}
		delay = l.shortage(err, delay)
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-timer.C:
		case <-l.freed:
			timer.Stop()
		case <-ctx.Done():
			return l.errorf(context.Cause(ctx))
		case <-l.done:
			return l.errorf(net.ErrClosed)
		}
	}
}

// shortage logs an accept that failed for lack of resources (err) and
// returns the next back-off, doubling prev within its bounds: at Warn for
// the first failure of a shortage, at Debug for the rest (shortageQuiet).
func (l *Listener) shortage(err error, prev time.Duration) time.Duration {
	delay := min(max(2*prev, acceptBackoffMin), acceptBackoffMax)
	level, now := contract.LevelDebug, time.Now()
	if l.lastShort.IsZero() || now.Sub(l.lastShort) > shortageQuiet {
		level = contract.LevelWarn
	}
	l.lastShort = now
	contract.Log(l.log, level, "srcs: accept failed; backing off",
		"listener", l.name, "err", err, "delay", delay)
	return delay
}

// exhausted says whether an accept error is a shortage that passes once
// descriptors or memory are freed, so retrying later is right.
func exhausted(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// release returns an accepted connection's slot.
func (l *Listener) release() {
	if l.slots != nil {
		<-l.slots
	}
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// Close stops listening and unblocks pending Accepts. It is idempotent.
//
// On a listener with TLS or the PROXY protocol, Close also cuts the
// handshakes in progress and waits for them: no goroutine of the listener
// outlives it.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		if err := l.ln.Close(); err != nil {
			l.closeErr = fmt.Errorf("srcs: close %s: %w", l.name, err)
		}
		if l.rawf != nil {
			l.rawf.Close()
		}
		if l.hs != nil {
			l.hs.close()
		}
	})
	return l.closeErr
}

// acceptedConn is a connection returned by Listener.AcceptSource: a Conn whose
// Close also gives its slot under MaxConns back to the listener. Like
// Conn, it is a Source, a Descriptor and a Deadliner, and is not safe for
// concurrent use except that Close and SetReadDeadline may be called while
// Read blocks.
type acceptedConn struct {
	*Conn
	l    *Listener
	once sync.Once
	// guard checks the first bytes of an untrusted connection on a PROXY
	// listener that had sent nothing decisive when it was accepted; nil
	// for every other connection.
	guard *firstBytes
}

// Read reads from the connection. On a connection with a guard, its first
// bytes are checked before any is delivered: a PROXY signature from an
// untrusted peer fails Read with an error wrapping ErrProxyUntrusted.
func (c *acceptedConn) Read(p []byte) (int, error) {
	if g := c.guard; g != nil && !g.decided {
		return g.read(c, p)
	}
	return c.Conn.Read(p)
}

// Encrypted implements the capability: true for a TLS session, and for a
// connection whose first bytes its Read must still check, which a runner
// must therefore not read raw.
func (c *acceptedConn) Encrypted() bool { return c.guard != nil || c.Conn.Encrypted() }

// Desc returns the connection's descriptor; a connection whose first
// bytes its Read must check has none to give (ErrNoDescriptor).
func (c *acceptedConn) Desc() (contract.Desc, error) {
	if c.guard != nil {
		return contract.Desc{}, fmt.Errorf("srcs: %s: its first bytes are checked by Read: %w", c.Name(), ErrNoDescriptor)
	}
	return c.Conn.Desc()
}

// Framer implements Framed: the listener's ListenerConfig.Framer.
func (c *acceptedConn) Framer() Framer { return c.l.framer }

var _ Framed = (*acceptedConn)(nil)

// Close closes the connection and releases its slot exactly once, after
// the descriptor is closed so that a listener starved of descriptors can
// use it.
func (c *acceptedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.closedConn()
		c.l.release()
	})
	return err
}

var (
	_ Source              = (*acceptedConn)(nil)
	_ contract.Descriptor = (*acceptedConn)(nil)
	_ Deadliner           = (*acceptedConn)(nil)
)
