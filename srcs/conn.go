package srcs

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/wire/tlsread"
	"golang.org/x/sys/unix"
)

// Conn is a source over one connected stream socket: an accepted TCP or
// unix connection, or a dialed one. It is open from creation; Open only
// checks that it has not been closed.
//
// Read goes through the net.Conn and Go's netpoller. Desc detaches the
// socket from the netpoller instead: it duplicates the descriptor, closes
// the net.Conn, and from then on the source owns the raw descriptor (in
// non-blocking mode), so a runner that drives descriptors gets readiness
// only from its own epoll set or ring. After Desc, Read is unavailable.
//
// A Conn over a TLS session (a listener's or a client's with TLS) is
// Encrypted: it has no descriptor to give (Desc fails with
// ErrNoDescriptor), so the engine reads it on the goroutine runner,
// through Read, which decrypts. Its SyscallConn waits for plaintext rather
// than for a readable socket (see tlsread.Wait), so that runner holds no pool
// buffer for an idle session.
//
// Conn is not safe for concurrent use, except that Close and
// SetReadDeadline may be called while Read blocks.
type Conn struct {
	name     string
	identity string          // a TLS client's verified subject, or ""
	raw      net.Conn        // the socket under a TLS session; nil without TLS
	tls      *tlsread.Reader // reads the TLS session; nil without TLS

	mu     sync.Mutex
	c      net.Conn // nil once detached
	fd     int      // the detached descriptor, or -1
	closed bool
}

// NewConn wraps a connected stream socket. The source takes ownership of c.
func NewConn(c net.Conn) *Conn {
	return newConn(c, connName(c))
}

// newConn is NewConn under a name of the caller's (the address a PROXY
// header gave).
func newConn(c net.Conn, name string) *Conn {
	return &Conn{name: name, c: c, fd: -1}
}

// newTLSConn wraps a TLS session whose handshake is done: sess reads its
// plaintext, over the socket raw. name is the source's name; id, the
// subject of a client's verified certificate, is the source's Identity
// and ends the name, in brackets. The source takes ownership of both. Its
// Close closes the socket without sending a close_notify alert, which
// could block on a peer that reads nothing: an ingest source's peer only
// writes.
func newTLSConn(sess, raw net.Conn, id, name string) *Conn {
	if id != "" {
		name += " [" + id + "]"
	}
	return &Conn{name: name, identity: id, raw: raw, tls: tlsread.NewReader(sess), c: sess, fd: -1}
}

// Encrypted says the socket carries ciphertext, so the engine reads the
// source through Read (contract.Encrypted): true for a TLS session.
func (s *Conn) Encrypted() bool { return s.raw != nil }

// Identity returns a TLS client's verified certificate subject, or "".
func (s *Conn) Identity() string { return s.identity }

func connName(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil && a.String() != "" && a.String() != "@" {
		return a.Network() + "://" + a.String()
	}
	if a := c.LocalAddr(); a != nil {
		return a.Network() + "://" + a.String()
	}
	return "conn"
}

// Name returns the peer address as network://addr.
func (s *Conn) Name() string { return s.name }

// Open succeeds while the connection has not been closed.
func (s *Conn) Open(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("srcs: open %s: %w", s.name, net.ErrClosed)
	}
	return nil
}

// Read reads from the connection through the Go netpoller; on a TLS
// session, through crypto/tls (see tlsread.Reader).
func (s *Conn) Read(p []byte) (int, error) {
	if s.tls != nil {
		return s.tls.Read(p)
	}
	s.mu.Lock()
	c := s.c
	s.mu.Unlock()
	if c == nil {
		return 0, fmt.Errorf("srcs: read %s: descriptor detached for a runner", s.name)
	}
	return c.Read(p)
}

// SetReadDeadline sets the deadline of a pending or future Read.
func (s *Conn) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	c := s.c
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.SetReadDeadline(t)
}

// SyscallConn returns the connection's raw descriptor access through Go's
// netpoller, so that a runner can wait for readability before it takes a
// buffer. It fails once Desc has detached the descriptor. On a TLS
// session it returns a tlsread.Wait, whose Read waits for plaintext.
func (s *Conn) SyscallConn() (syscall.RawConn, error) {
	if s.tls != nil {
		return tlsread.Wait{R: s.tls, Raw: s.raw, Name: s.name}, nil
	}
	s.mu.Lock()
	c := s.c
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("srcs: %s: descriptor detached for a runner", s.name)
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("srcs: %s: %w", s.name, ErrNoDescriptor)
	}
	return sc.SyscallConn()
}

// Desc is for the engine's runners, which read the socket themselves; a
// program has no use for it. It detaches the socket from Go's netpoller
// on first use and returns it.
func (s *Conn) Desc() (contract.Desc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return contract.Desc{}, fmt.Errorf("srcs: %s: %w", s.name, net.ErrClosed)
	}
	if s.fd >= 0 {
		return contract.Desc{FD: s.fd, Kind: contract.Stream}, nil
	}
	if s.raw != nil {
		return contract.Desc{}, fmt.Errorf("srcs: %s: a TLS session: %w", s.name, ErrNoDescriptor)
	}
	sc, ok := s.c.(syscall.Conn)
	if !ok {
		return contract.Desc{}, fmt.Errorf("srcs: %s: %w", s.name, ErrNoDescriptor)
	}
	fd, err := detach(s.name, sc, s.c)
	if err != nil {
		return contract.Desc{}, err
	}
	s.c, s.fd = nil, fd
	return contract.Desc{FD: fd, Kind: contract.Stream}, nil
}

// detach duplicates the descriptor behind sc and closes c, so that the
// caller owns a raw descriptor Go's netpoller no longer watches. The
// duplicate shares the open file description, so it keeps its
// non-blocking mode and, for a datagram socket, its binding; closing c
// only drops Go's copy.
func detach(name string, sc syscall.Conn, c io.Closer) (int, error) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("srcs: %s: %w", name, err)
	}
	fd, dupErr := -1, error(nil)
	if err := rc.Control(func(raw uintptr) {
		fd, dupErr = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, fmt.Errorf("srcs: %s: %w", name, err)
	}
	if dupErr != nil {
		return -1, fmt.Errorf("srcs: %s: dup: %w", name, os.NewSyscallError("fcntl", dupErr))
	}
	c.Close()
	return fd, nil
}

// Close closes the connection or the detached descriptor. It is idempotent.
func (s *Conn) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.fd >= 0 {
		fd := s.fd
		s.fd = -1
		return os.NewSyscallError("close", unix.Close(fd))
	}
	if s.raw != nil {
		return s.raw.Close()
	}
	return s.c.Close()
}

var (
	_ contract.Encrypted = (*Conn)(nil)
	_ Identified         = (*Conn)(nil)
)

// Sources whose runner may wait for readability before taking a buffer.
var (
	_ syscall.Conn = (*Conn)(nil)
	_ syscall.Conn = (*TCPClient)(nil)
	_ syscall.Conn = (*UnixClient)(nil)
)
