package srcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/wire/proxy"
	"golang.org/x/sys/unix"
)

// AcceptDescriptor is AcceptSource for an engine whose runner reads
// descriptors itself (uring, epoll, thread): it returns the connection as
// its raw socket, non-blocking, accepted with accept4(2) on the listener's
// descriptor. engine.Engine.AddListener calls it. No net.Conn is made for it, Go's netpoller never watches
// it (only the listener's own socket is), and no goroutine waits for it:
// an idle connection costs its source record and its name. The source
// offers its descriptor from the start, so no runner has to duplicate it.
//
// It honours MaxConns, the back-off when descriptors run out, Allow and
// the counters, and names the source by its peer, as AcceptSource does. A
// TCP listener sets TCP keepalive on its own socket (see ListenTCP), which
// accepted sockets inherit. A listener with TLS or the
// PROXY protocol, whose connections must be read through Go, returns
// AcceptSource's connections instead.
//
// The source's Read reads the socket with read(2), which does not wait:
// it is for runners that wait for readability themselves.
func (l *Listener) AcceptDescriptor(ctx context.Context) (Source, error) {
	if l.hs != nil || l.rawf == nil {
		return l.AcceptSource(ctx)
	}
	var c *acceptedFD
	if err := l.takeTurn(ctx, func() error {
		return l.retryAccept(ctx, l.rawf.SetDeadline, func() (bool, error) {
			fd, sa, err := l.accept4()
			if err != nil || fd < 0 {
				return false, err
			}
			if c = l.admitFD(fd, sa); c == nil {
				return false, nil
			}
			return true, nil
		})
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// accept4 accepts one connection, waiting in Go's netpoller (and so for
// the listener's deadline) while none is queued. fd is -1 with no error
// for an accept worth retrying at once.
func (l *Listener) accept4() (fd int, sa unix.Sockaddr, err error) {
	rc, err := l.rawf.SyscallConn()
	if err != nil {
		return -1, nil, err
	}
	var aerr error
	fd = -1
	if err := rc.Read(func(lfd uintptr) bool {
		fd, sa, aerr = unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		return aerr != unix.EAGAIN
	}); err != nil {
		if errors.Is(err, os.ErrClosed) {
			err = net.ErrClosed // Close closed the duplicate
		}
		return -1, nil, err
	}
	switch aerr {
	case nil:
		return fd, sa, nil
	case unix.ECONNABORTED, unix.EINTR:
		// The peer gave up while queued, or a signal: as Go's Accept does,
		// try again.
		return -1, nil, nil
	}
	return -1, nil, os.NewSyscallError("accept4", aerr)
}

// admitFD applies Allow to an accepted socket and names it: nil when it
// was refused (and closed).
func (l *Listener) admitFD(fd int, sa unix.Sockaddr) *acceptedFD {
	var name string
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		name = l.admitPeer(netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), "")
	case *unix.SockaddrInet6:
		name = l.admitPeer(netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), "")
	case *unix.SockaddrUnix:
		name = l.admitPeer(netip.AddrPort{}, a.Name)
	default:
		name = "conn"
	}
	if name == "" {
		unix.Close(fd)
		return nil
	}
	return l.newAcceptedFD(fd, name)
}

func (l *Listener) newAcceptedFD(fd int, name string) *acceptedFD {
	c := &acceptedFD{name: name, l: l}
	c.fd.Store(int32(fd))
	return c
}

// admitPeer applies Allow to a connection from peer (TCP), or from a unix
// socket bound to path (when peer is not valid), and returns its name: ""
// when it refused it, which the caller then closes.
func (l *Listener) admitPeer(peer netip.AddrPort, path string) string {
	if !peer.IsValid() {
		// As package net names an accepted unix connection: by its peer's
		// name if it bound one, else by the listener's.
		if path != "" && path != "@" {
			return "unix://" + path
		}
		return "unix://" + l.ln.Addr().String()
	}
	if ip := peer.Addr(); l.allow != nil && !proxy.InPrefixes(l.allow, ip) && (l.trusted == nil || !proxy.InPrefixes(l.trusted, ip)) {
		l.refuse(refDenied, net.TCPAddrFromAddrPort(peer), fmt.Errorf("%s is not in allow", ip))
		return ""
	}
	var b [64]byte // one allocation per name: the name itself
	return string(peer.AppendTo(append(b[:0], "tcp://"...)))
}

// acceptedFD is a connection AcceptDescriptor accepted: its socket, as a
// raw non-blocking descriptor the source owns, and its slot under the
// listener's MaxConns. It is a Source, a Descriptor and Framed; not safe
// for concurrent use, except that Close may be called at any time.
type acceptedFD struct {
	name string
	l    *Listener
	fd   atomic.Int32 // -1 once closed
}

var (
	_ Source              = (*acceptedFD)(nil)
	_ contract.Descriptor = (*acceptedFD)(nil)
	_ Framed              = (*acceptedFD)(nil)
	_ contract.HandOff    = (*acceptedFD)(nil)
)

// fdHandedOff is acceptedFD.fd once a runner took the socket (HandOff).
const fdHandedOff = -2

func (c *acceptedFD) Name() string { return c.name }

// Framer implements Framed: the listener's ListenerConfig.Framer.
func (c *acceptedFD) Framer() Framer { return c.l.framer }

// Open succeeds while the connection has not been closed.
func (c *acceptedFD) Open(context.Context) error {
	if c.fd.Load() < 0 {
		return fmt.Errorf("srcs: open %s: %w", c.name, net.ErrClosed)
	}
	return nil
}

// Desc returns the socket.
func (c *acceptedFD) Desc() (contract.Desc, error) {
	fd := c.fd.Load()
	if fd < 0 {
		return contract.Desc{}, fmt.Errorf("srcs: %s: %w", c.name, net.ErrClosed)
	}
	return contract.Desc{FD: int(fd), Kind: contract.Stream}, nil
}

// Read reads the socket once with read(2), which does not wait: EAGAIN
// when nothing is queued, io.EOF at the end.
func (c *acceptedFD) Read(p []byte) (int, error) {
	fd := c.fd.Load()
	if fd < 0 {
		return 0, fmt.Errorf("srcs: read %s: %w", c.name, net.ErrClosed)
	}
	n, err := unix.Read(int(fd), p)
	switch {
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// HandOff implements contract.HandOff: the runner takes the socket, and Close
// only gives the listener its slot back.
func (c *acceptedFD) HandOff(fd int) bool {
	return fd >= 0 && c.fd.CompareAndSwap(int32(fd), fdHandedOff)
}

// Close closes the socket, unless a runner took it (HandOff), and then
// gives its slot back to the listener, exactly once, so that a listener
// starved of descriptors can use it.
func (c *acceptedFD) Close() error {
	fd := c.fd.Swap(-1)
	switch fd {
	case -1:
		return nil
	case fdHandedOff:
		c.l.closedConn()
		c.l.release()
		return nil
	}
	err := unix.Close(int(fd))
	c.l.closedConn()
	c.l.release()
	return os.NewSyscallError("close", err)
}

// rawListener returns a duplicate of the listening socket as a file on
// Go's netpoller, for AcceptDescriptor to wait on: a net.Listener's own
// raw access offers no Read. The duplicate shares the socket, its
// backlog and its non-blocking mode; Listener.Close closes it. It
// returns nil when ln offers no descriptor or it cannot be duplicated,
// and AcceptDescriptor then returns AcceptSource's connections.
func rawListener(ln streamListener) *os.File {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	nfd := -1
	if err := rc.Control(func(fd uintptr) {
		nfd, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || nfd < 0 {
		return nil
	}
	return os.NewFile(uintptr(nfd), ln.Addr().String())
}

// Keepalive on a TCP listener's socket: accepted sockets inherit
// SO_KEEPALIVE and the TCP_KEEP* settings from it (the kernel clones the
// listener's socket for each connection and arms the keepalive timer of a
// clone with SO_KEEPALIVE set), so those AcceptDescriptor returns probe
// idle peers as Go's accepted connections do by default (15s idle, 15s
// between probes, 9 probes).
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// setKeepAlive sets the keepalive options on a TCP listener's socket.
func setKeepAlive(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for _, o := range [...]struct{ level, opt, v int }{
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(keepAliveIdle / time.Second)},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval / time.Second)},
			{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
		} {
			if err := unix.SetsockoptInt(int(fd), o.level, o.opt, o.v); err != nil {
				serr = os.NewSyscallError("setsockopt", err)
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
