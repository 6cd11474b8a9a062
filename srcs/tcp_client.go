package srcs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/wire/trusthook"
)

// DefaultDialTimeout bounds a TCPClient's dial when DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// TCPClientConfig configures NewTCPClient.
type TCPClientConfig struct {
	// Addr is the server's "host:port". The host may be a name, resolved
	// at each dial.
	Addr string `yaml:"addr"`
	// DialTimeout bounds one dial, name resolution included. Zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// Backoff is what Reconnect reports to the engine; zero fields take
	// the defaults (Initial 50ms, Max 5s).
	Backoff Backoff `yaml:"backoff"`
	// TLS, when set, runs TLS over each connection, verifying the server
	// (against CAFile, or the system's roots) and sending a client
	// certificate if CertFile is set; DialTimeout bounds the handshake
	// too. The source is then Encrypted: the engine reads it on the
	// goroutine runner, which decrypts into pool buffers.
	TLS *TLSConfig `yaml:"tls"`
}

// TCPClient is a source that dials a TCP server. Each Open dials once and
// starts a session; Close ends it, and Open may then dial again (it is a
// Reconnector). Between Open and Close it behaves as a Conn: Read goes
// through the Go netpoller, and Desc detaches the socket for a runner.
//
// In an engine its sessions share one source id and one run of chunk
// numbers, and only its last session ends with an end-of-stream chunk;
// added with engine.WithSessionEnds, every earlier session ends with an
// empty chunk marked SessionEnd, so a consumer can tell the connections
// apart.
//
// TCPClient is not safe for concurrent use, except that Close and
// SetReadDeadline may be called while Read blocks.
type TCPClient struct {
	streamClient
}

// NewTCPClient checks cfg and returns a client that has not dialed yet.
func NewTCPClient(cfg TCPClientConfig) (*TCPClient, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("srcs: tcp client: %w", err)
	}
	c := &TCPClient{newStreamClient("tcp", cfg.Addr, cfg.DialTimeout, cfg.Backoff)}
	c.terse = true
	if cfg.TLS != nil {
		host, _, _ := net.SplitHostPort(cfg.Addr)
		hs, err := cfg.TLS.client(host, nil)
		if err != nil {
			return nil, fmt.Errorf("srcs: tcp client %s: %w", cfg.Addr, err)
		}
		c.tls, c.name = hs, "tls://"+cfg.Addr
	}
	return c, nil
}

func (cfg TCPClientConfig) validate() error {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("Addr %q: %w", cfg.Addr, err)
	}
	if host == "" {
		return fmt.Errorf("Addr %q: missing host", cfg.Addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("Addr %q: port must be a number from 1 to 65535", cfg.Addr)
	}
	if cfg.DialTimeout < 0 {
		return fmt.Errorf("DialTimeout: %v is negative", cfg.DialTimeout)
	}
	return cfg.Backoff.Validate("Backoff")
}

// streamClient is the dialing source behind TCPClient and UnixClient: one
// session (a Conn) per Open. Its concurrency rules are theirs.
type streamClient struct {
	network, addr string
	name          string // network://addr
	timeout       time.Duration
	backoff       Backoff
	tls           trusthook.Handshake // nil without TLS
	// terse leaves the address out of Open's errors (TCPClient): see
	// dialError.
	terse bool

	mu   sync.Mutex
	conn *Conn // the current session; nil between sessions
}

// newStreamClient fills in the defaults of a checked configuration.
func newStreamClient(network, addr string, timeout time.Duration, b Backoff) streamClient {
	if timeout == 0 {
		timeout = DefaultDialTimeout
	}
	return streamClient{
		network: network, addr: addr, name: network + "://" + addr,
		timeout: timeout, backoff: b.WithDefaults(),
	}
}

// Name returns "network://address" as configured: "tcp://host:port" or
// "unix://path".
func (c *streamClient) Name() string { return c.name }

// Open dials the server once, within DialTimeout and ctx. A timeout, from
// either, wraps ErrTimeout; the cause (a *net.OpError, a *net.DNSError)
// stays reachable with errors.As. Open fails if a session is already open.
//
// A TCPClient's error does not repeat the address: Name gives it, and
// the engine reports the error in a *SourceError that names the source,
// so that a refused redial reads "source 3 (tcp://10.0.0.7:9100): open:
// srcs: dial: connect: connection refused". The *net.OpError inside
// keeps it (its Addr). A UnixClient's error names the path.
func (c *streamClient) Open(ctx context.Context) error {
	c.mu.Lock()
	open := c.conn != nil
	c.mu.Unlock()
	if open {
		return fmt.Errorf("srcs: open%s: session already open", c.where())
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, c.network, c.addr)
	if err != nil {
		var op *net.OpError
		if c.terse && errors.As(err, &op) {
			return fmt.Errorf("srcs: %w", classify(&dialError{op}))
		}
		return fmt.Errorf("srcs: open%s: %w", c.where(), classify(err))
	}
	conn := NewConn(nc)
	if c.tls != nil {
		sess, id, err := c.tls.Run(ctx, nc)
		if err != nil {
			nc.Close()
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrTimeout, err)
			}
			return fmt.Errorf("srcs: open%s: tls handshake: %w", c.where(), classify(err))
		}
		conn = newTLSConn(sess, nc, id, c.name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil { // a concurrent Open won, which the contract forbids
		conn.Close()
		return fmt.Errorf("srcs: open%s: session already open", c.where())
	}
	c.conn = conn
	return nil
}

// where is the source's name for Open's errors, with its leading space,
// or nothing for a terse client.
func (c *streamClient) where() string {
	if c.terse {
		return ""
	}
	return " " + c.name
}

// dialError is a failed dial that prints without the addresses its
// *net.OpError repeats ("dial tcp 10.0.0.7:9100: connect: connection
// refused" becomes "dial: connect: connection refused"): the source's
// name already says where. Unwrap gives the *net.OpError whole.
type dialError struct{ op *net.OpError }

func (e *dialError) Error() string {
	if e.op.Err == nil {
		return e.op.Op
	}
	return e.op.Op + ": " + e.op.Err.Error()
}

func (e *dialError) Unwrap() error { return e.op }

// Encrypted says the socket carries ciphertext, so the engine reads the
// source through Read (contract.Encrypted): true when the client runs TLS.
func (c *streamClient) Encrypted() bool { return c.tls != nil }

// session returns the current session, or an error wrapping net.ErrClosed.
func (c *streamClient) session(op string) (*Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil, fmt.Errorf("srcs: %s %s: no session: %w", op, c.name, net.ErrClosed)
	}
	return c.conn, nil
}

// Read reads from the current session through the Go netpoller.
func (c *streamClient) Read(p []byte) (int, error) {
	s, err := c.session("read")
	if err != nil {
		return 0, err
	}
	return s.Read(p)
}

// SetReadDeadline sets the deadline of the current session's reads.
func (c *streamClient) SetReadDeadline(t time.Time) error {
	s, err := c.session("set deadline")
	if err != nil {
		return err
	}
	return s.SetReadDeadline(t)
}

// SyscallConn gives the current session's raw connection, so that a
// runner can wait for readability before it takes a buffer (see
// Conn.SyscallConn).
func (c *streamClient) SyscallConn() (syscall.RawConn, error) {
	s, err := c.session("syscall conn")
	if err != nil {
		return nil, err
	}
	return s.SyscallConn()
}

// Desc is for the engine's runners, which read the socket themselves; a
// program has no use for it. It detaches the current session's socket
// (see Conn.Desc).
func (c *streamClient) Desc() (contract.Desc, error) {
	s, err := c.session("desc")
	if err != nil {
		return contract.Desc{}, err
	}
	return s.Desc()
}

// Reconnect returns the configured back-off with defaults filled in.
func (c *streamClient) Reconnect() Backoff { return c.backoff }

// Close ends the current session. It is idempotent, and Open may follow.
func (c *streamClient) Close() error {
	c.mu.Lock()
	s := c.conn
	c.conn = nil
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	if err := s.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("srcs: close %s: %w", c.name, err)
	}
	return nil
}

var (
	_ Source              = (*TCPClient)(nil)
	_ contract.Descriptor = (*TCPClient)(nil)
	_ Deadliner           = (*TCPClient)(nil)
	_ Reconnector         = (*TCPClient)(nil)
	_ contract.Encrypted  = (*TCPClient)(nil)
)
