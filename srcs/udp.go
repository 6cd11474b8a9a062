package srcs

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"golang.org/x/sys/unix"
)

// UDPConfig configures ListenUDP.
type UDPConfig struct {
	// Addr is the local address to bind, "host:port": "127.0.0.1:0" or
	// "[::1]:0" pick a free port, ":514" binds every address (dual-stack
	// where the system allows). Required.
	Addr string `yaml:"addr"`
	// ReadBuffer sets the socket's receive buffer (SO_RCVBUF) in bytes;
	// the kernel doubles it and caps it at net.core.rmem_max. Zero keeps
	// the system default.
	ReadBuffer int `yaml:"read_buffer"`
	// MaxDatagram is the largest datagram the sender is expected to send,
	// from 1 to 65535 bytes. Runners reserve this much room per receive,
	// so a small limit (say 1472 for one Ethernet frame) packs many
	// datagrams into each buffer, while the default, MaxUDPPayload, packs
	// one datagram per buffer unless buffers are larger than 128 KiB.
	// Longer datagrams are delivered when they happen to fit and are
	// dropped otherwise (counted in engine.SourceStats). Zero means
	// MaxUDPPayload.
	MaxDatagram int `yaml:"max_datagram"`
}

// maxUDPLength is the most any UDP length field can state.
const maxUDPLength = 65535

// UDPSource is a source over one bound, unconnected UDP socket: every
// datagram sent to its address, from any peer, becomes a framed datagram in
// its chunks (see ForEachDatagram). Peer addresses are not kept. The
// socket has no end: it delivers until the runner stops it, and Open may be
// called again after a Remove, until Close.
//
// ListenUDP binds the socket at once, so LocalAddr is known before the
// engine opens the source; Open only checks that it has not been closed.
// Read and ReadDatagram go through the net.UDPConn and Go's netpoller. Desc
// detaches the socket from the netpoller instead: it duplicates the
// descriptor, closes the net.UDPConn and from then on owns the raw,
// non-blocking descriptor, which runners read with recvmsg(2). After Desc,
// Read is unavailable.
//
// Kernel drops (a full receive buffer) are counted by Drops. The socket also
// has SO_RXQ_OVFL set on Linux, so a runner that passes a control buffer to
// recvmsg receives the same counter with each datagram.
//
// UDPSource is not safe for concurrent use, except that Close,
// SetReadDeadline, LocalAddr and Drops may be called from any goroutine,
// also while Read blocks.
type UDPSource struct {
	name  string
	addr  net.Addr
	limit int
	ino   uint64 // the socket's inode, which names it in /proc/net/udp

	mu     sync.Mutex
	c      *net.UDPConn // nil once detached
	fd     int          // the detached descriptor, or -1
	closed bool
}

var (
	_ Source                  = (*UDPSource)(nil)
	_ contract.Descriptor     = (*UDPSource)(nil)
	_ Deadliner               = (*UDPSource)(nil)
	_ contract.DatagramReader = (*UDPSource)(nil)
	_ contract.DatagramSizer  = (*UDPSource)(nil)
)

// ListenUDP binds a UDP socket as cfg says and returns it as a source.
func ListenUDP(cfg UDPConfig) (*UDPSource, error) {
	switch {
	case cfg.Addr == "":
		return nil, fmt.Errorf("srcs: listen udp: Addr: empty")
	case cfg.ReadBuffer < 0:
		return nil, fmt.Errorf("srcs: listen udp: ReadBuffer: %d is negative", cfg.ReadBuffer)
	case cfg.MaxDatagram < 0 || cfg.MaxDatagram > maxUDPLength:
		return nil, fmt.Errorf("srcs: listen udp: MaxDatagram: %d is not from 0 to %d", cfg.MaxDatagram, maxUDPLength)
	}
	pc, err := net.ListenPacket("udp", cfg.Addr)
	if err != nil {
		return nil, &listenError{"udp", cfg.Addr, err}
	}
	c := pc.(*net.UDPConn)
	s := &UDPSource{addr: c.LocalAddr(), limit: cfg.MaxDatagram, c: c, fd: -1}
	s.name = "udp://" + s.addr.String()
	if s.limit == 0 {
		s.limit = MaxUDPPayload
	}
	if err := s.setup(cfg); err != nil {
		c.Close()
		return nil, fmt.Errorf("srcs: listen udp %s: %w", s.addr, err)
	}
	return s, nil
}

// setup applies the socket options and learns the socket's inode.
func (s *UDPSource) setup(cfg UDPConfig) error {
	if cfg.ReadBuffer > 0 {
		if err := s.c.SetReadBuffer(cfg.ReadBuffer); err != nil {
			return err
		}
	}
	rc, err := s.c.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		if opErr = enableDropCounter(int(fd)); opErr != nil {
			return
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(fd), &st); err != nil {
			opErr = os.NewSyscallError("fstat", err)
			return
		}
		s.ino = uint64(st.Ino)
	}); err != nil {
		return err
	}
	return opErr
}

// Name returns the bound address as udp://addr.
func (s *UDPSource) Name() string { return s.name }

// LocalAddr returns the bound address, with the port the system picked.
func (s *UDPSource) LocalAddr() net.Addr { return s.addr }

// MaxDatagram returns UDPConfig.MaxDatagram, or MaxUDPPayload.
func (s *UDPSource) MaxDatagram() int { return s.limit }

// Open succeeds while the socket has not been closed.
func (s *UDPSource) Open(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("srcs: open %s: %w", s.name, net.ErrClosed)
	}
	return nil
}

func (s *UDPSource) conn() (*net.UDPConn, error) {
	s.mu.Lock()
	c := s.c
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("srcs: %s: descriptor detached for a runner", s.name)
	}
	return c, nil
}

// Read receives one datagram into p. A datagram longer than p is discarded
// and reported as an error wrapping ErrDatagramTooLarge, with n the bytes
// that were copied. Runners use ReadDatagram instead.
func (s *UDPSource) Read(p []byte) (int, error) {
	n, truncated, err := s.ReadDatagram(p)
	if err == nil && truncated {
		err = fmt.Errorf("srcs: read %s: %w (more than %d bytes)", s.name, ErrDatagramTooLarge, len(p))
	}
	return n, err
}

// ReadDatagram receives one datagram into p through Go's netpoller, for
// the goroutine runner (contract.DatagramReader). It allocates nothing.
func (s *UDPSource) ReadDatagram(p []byte) (int, bool, error) {
	c, err := s.conn()
	if err != nil {
		return 0, false, err
	}
	n, _, flags, _, err := c.ReadMsgUDPAddrPort(p, nil)
	return n, flags&unix.MSG_TRUNC != 0, err
}

// SetReadDeadline sets the deadline of a pending or future Read.
func (s *UDPSource) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	c := s.c
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.SetReadDeadline(t)
}

// SyscallConn returns the socket's raw descriptor access through Go's
// netpoller, so that a runner can wait for a datagram before it takes a
// buffer. It fails once Desc has detached the descriptor.
func (s *UDPSource) SyscallConn() (syscall.RawConn, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	return c.SyscallConn()
}

// Desc is for the engine's runners, which read the socket themselves; a
// program has no use for it. It detaches the socket from Go's netpoller
// on first use and returns it as a datagram descriptor.
func (s *UDPSource) Desc() (contract.Desc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return contract.Desc{}, fmt.Errorf("srcs: %s: %w", s.name, net.ErrClosed)
	}
	if s.fd >= 0 {
		return contract.Desc{FD: s.fd, Kind: contract.Datagram}, nil
	}
	fd, err := detach(s.name, s.c, s.c)
	if err != nil {
		return contract.Desc{}, err
	}
	s.c, s.fd = nil, fd
	return contract.Desc{FD: fd, Kind: contract.Datagram}, nil
}

// Drops returns how many datagrams the kernel dropped for this socket since
// it was bound, mostly because its receive buffer was full (the runner was
// paused, or too slow). On Linux it reads the "drops" column of
// /proc/net/udp and /proc/net/udp6 for the socket's inode, which costs a
// scan of every UDP socket in the network namespace: call it for stats, not
// per datagram. Elsewhere it fails with an error wrapping
// errors.ErrUnsupported.
func (s *UDPSource) Drops() (uint64, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("srcs: %s: drops: %w", s.name, net.ErrClosed)
	}
	n, err := udpDrops(s.ino)
	if err != nil {
		return 0, fmt.Errorf("srcs: %s: drops: %w", s.name, err)
	}
	return n, nil
}

// Close closes the socket or the detached descriptor. It is idempotent.
func (s *UDPSource) Close() error {
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
	return s.c.Close()
}
