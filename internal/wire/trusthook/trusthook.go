// Package trusthook is where package srcs finds TLS and the PROXY
// protocol for its listeners and clients. Package srcs/trust provides
// them, registering here when a program links it; without it, srcs
// refuses a listener or a client that asks for them, saying what to
// import. So a program that serves neither links neither crypto/tls nor
// a PROXY header parser, as a program links a hash of crypto only when
// it imports the package that registers it (crypto.RegisterHash).
package trusthook

import (
	"context"
	"errors"
	"net"
)

// Logger is what TLS logs through: srcs.Logger's methods, which
// *slog.Logger has.
type Logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// TLSConfig is srcs.TLSConfig's data, field for field, which srcs
// converts to it.
type TLSConfig struct {
	CertFile           string
	KeyFile            string
	CAFile             string
	ClientAuth         string
	ServerName         string
	InsecureSkipVerify bool
	MinVersion         string
}

// Provider is what srcs/trust provides. It is safe for concurrent use.
type Provider interface {
	// Server checks c for a listener, loads its certificate (and CAs),
	// and returns the server's side of the handshake. Errors name the
	// YAML keys under tls.
	Server(c TLSConfig, log Logger) (Handshake, error)
	// Client checks c for a client of host and returns the client's side
	// of the handshake. Errors name the YAML keys under tls.
	Client(c TLSConfig, host string, log Logger) (Handshake, error)
	// ProxyAddr parses a PROXY header, given whole, and returns the
	// original client's address, or nil for a header that names none (a
	// LOCAL command, an UNKNOWN family).
	ProxyAddr(header []byte) (net.Addr, error)
}

// Handshake runs one side of a TLS handshake. Safe for concurrent use.
type Handshake interface {
	// Run handshakes over c within ctx (and c's deadline), and returns the
	// session, a net.Conn whose Read returns plaintext, with the subject
	// of the peer's verified certificate, or "". A client certificate a
	// server rejects (missing, or not signed by its CAs) is an error
	// wrapping ErrCertRejected.
	Run(ctx context.Context, c net.Conn) (sess net.Conn, identity string, err error)
}

// ErrCertRejected is wrapped by a server handshake that refused the
// client's certificate.
var ErrCertRejected = errors.New("client certificate rejected")

// provider is set once, at srcs/trust's initialization, before main runs,
// and only read after.
var provider Provider

// Register makes p the provider. srcs/trust calls it in its init.
func Register(p Provider) { provider = p }

// Get returns the provider, or nil when the program does not link
// srcs/trust.
func Get() Provider { return provider }
