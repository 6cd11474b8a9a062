package srcs

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"golang.org/x/sys/unix"
)

// staleProbeTimeout bounds the connect that tells a stale socket file from
// a live listener's before ListenUnix replaces it.
const staleProbeTimeout = time.Second

// ListenUnix listens on the unix stream socket at path, with the semantics
// of ListenTCP: the MaxConns cap, the back-off when descriptors run out,
// and Close or ctx ending a pending Accept. Accepted connections are named
// "unix://path".
//
// A socket file already at path is removed first if it is stale (connect
// is refused: its listener died without cleaning up); a live listener's
// socket, or a file that is not a socket, is left alone and ListenUnix
// fails with an error wrapping syscall.EADDRINUSE. Close removes the socket
// file it created.
//
// A path that starts with '@' names a socket in Linux's abstract
// namespace, which has no file: nothing is removed, and the name vanishes
// with the last descriptor. Elsewhere such a path fails with an error
// wrapping errors.ErrUnsupported.
func ListenUnix(path string, cfg ListenerConfig) (*Listener, error) {
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("srcs: listen unix %s: MaxConns: %d is negative", path, cfg.MaxConns)
	}
	if err := checkUnixPath(path); err != nil {
		return nil, fmt.Errorf("srcs: listen unix: %w", err)
	}
	if err := checkNoTrust(cfg); err != nil {
		return nil, fmt.Errorf("srcs: listen unix %s: %w", path, err)
	}
	if !isAbstract(path) {
		if err := removeStaleSocket(path); err != nil {
			return nil, fmt.Errorf("srcs: listen unix %s: %w", path, err)
		}
	}
	// ListenUnix unlinks the socket file on Close (SetUnlinkOnClose
	// defaults to true for listeners it creates).
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, &listenError{"unix", path, err}
	}
	return newListener(ln, "unix://"+path, cfg), nil
}

// isAbstract says whether path names a socket in Linux's abstract
// namespace, as package net spells it.
func isAbstract(path string) bool { return len(path) > 0 && path[0] == '@' }

// checkUnixPath rejects what bind(2) or connect(2) would reject with a
// less helpful error.
func checkUnixPath(path string) error {
	// sun_path is 108 bytes on Linux and 104 on the BSDs, NUL included
	// (for an abstract name, the leading NUL that replaces '@').
	max := len(unix.RawSockaddrUnix{}.Path) - 1
	switch {
	case path == "":
		return errors.New("Path is empty")
	case len(path) > max:
		return fmt.Errorf("Path %q: %d bytes, more than the %d a socket address holds", path, len(path), max)
	case isAbstract(path) && runtime.GOOS != "linux":
		return fmt.Errorf("Path %q: abstract socket names need Linux: %w", path, errors.ErrUnsupported)
	}
	return nil
}

// removeStaleSocket removes the socket file at path if no one listens on
// it any more. A missing file is fine.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%v file is in the way: %w", fi.Mode().Type(), syscall.EADDRINUSE)
	}
	c, err := net.DialTimeout("unix", path, staleProbeTimeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("another listener is live on it: %w", syscall.EADDRINUSE)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		// A full backlog (EAGAIN, a timeout) also means someone listens.
		return fmt.Errorf("probing the existing socket: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the stale socket: %w", err)
	}
	return nil
}

// UnixClientConfig configures NewUnixClient.
type UnixClientConfig struct {
	// Path is the server's socket: a file path, or on Linux "@name" for
	// the abstract namespace.
	Path string `yaml:"path"`
	// DialTimeout bounds one connect. Zero means DefaultDialTimeout.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// Backoff is what Reconnect reports to the engine; zero fields take
	// the defaults (Initial 50ms, Max 5s).
	Backoff Backoff `yaml:"backoff"`
}

func (cfg UnixClientConfig) validate() error {
	if err := checkUnixPath(cfg.Path); err != nil {
		return err
	}
	if cfg.DialTimeout < 0 {
		return fmt.Errorf("DialTimeout: %v is negative", cfg.DialTimeout)
	}
	return cfg.Backoff.Validate("Backoff")
}

// UnixClient is a source that connects to a unix stream socket, named
// "unix://path". It is TCPClient over a unix socket: each Open connects
// once and starts a session, Close ends it, and Open may connect again (it
// is a Reconnector). A server that is not there fails Open with an error
// naming the path and wrapping syscall.ENOENT (no socket file) or
// syscall.ECONNREFUSED (a file no one listens on).
//
// UnixClient is not safe for concurrent use, except that Close and
// SetReadDeadline may be called while Read blocks.
type UnixClient struct {
	streamClient
}

// NewUnixClient checks cfg and returns a client that has not connected yet.
func NewUnixClient(cfg UnixClientConfig) (*UnixClient, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("srcs: unix client: %w", err)
	}
	return &UnixClient{newStreamClient("unix", cfg.Path, cfg.DialTimeout, cfg.Backoff)}, nil
}

var (
	_ Source              = (*UnixClient)(nil)
	_ contract.Descriptor = (*UnixClient)(nil)
	_ Deadliner           = (*UnixClient)(nil)
	_ Reconnector         = (*UnixClient)(nil)
)
