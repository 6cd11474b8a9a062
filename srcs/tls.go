package srcs

// TLS for stream sources.
//
// The kernels sluice targets here have no kTLS, so a TLS session is
// decrypted in user space by crypto/tls, and its socket carries ciphertext
// that no runner may read raw. A TLS source is therefore Encrypted: the
// engine hands it to the goroutine runner, which reads plaintext through
// the source's Read straight into pool buffers (one copy, the decryption's
// own). The alternative, the ring reading ciphertext into pool buffers and
// a decrypt step after it, would need a TLS record layer of our own (the
// standard library's works only on a net.Conn), a second buffer per read
// and the key schedule outside crypto/tls: AES-GCM costs several times the
// read itself, so saving the netpoller's wake-up is not worth that. Where
// the kernel has kTLS, the ring could read plaintext directly (a later
// step).

import (
	"errors"
	"time"

	"github.com/sluice-io/sluice/internal/wire/trusthook"
)

// DefaultHandshakeTimeout bounds a listener's handshake (the PROXY header
// and the TLS handshake) when HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 10 * time.Second

// TLSConfig configures TLS on a listener (as the server) or on a TCP or
// MQTT (srcs/mqtt) client. Keys are named as they appear in YAML under a
// tls: section. TLS itself is package srcs/trust's: a program that uses a
// TLSConfig on a listener or a TCP client imports it (import _
// "github.com/sluice-io/sluice/srcs/trust"), and without it such a
// listener or client is refused, saying so; srcs/mqtt imports it itself.
// The certificate and key files, and a listener's CA file, are read at New
// and read again when they change on disk (checked at most once a second,
// at a handshake), so a renewed certificate is served, and a changed CA
// bundle verifies clients, from the next handshake on, without a restart
// and without touching open sessions; a file that fails to load then keeps
// the old one in use and is logged. A client's CA file is read once.
type TLSConfig struct {
	// CertFile and KeyFile are a PEM certificate chain and its private
	// key. A listener requires both; a client sends them as its client
	// certificate when set.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CAFile is a PEM bundle. On a listener it verifies client
	// certificates (and is required with ClientAuth); on a client it
	// verifies the server in place of the system's roots.
	CAFile string `yaml:"ca_file"`
	// ClientAuth, on a listener only: "none" (the default), "require"
	// (a client certificate signed by CAFile is required), or
	// "verify_if_given" (one is optional, but verified when sent). The
	// verified certificate's subject becomes the source's identity: its
	// name, and so every chunk's Name, ends with it in brackets.
	ClientAuth string `yaml:"client_auth"`
	// ServerName, on a client only, is the name the server's certificate
	// must hold. Default: the host of the address dialed.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify, on a client only, accepts any server
	// certificate. For tests; it is logged.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// MinVersion is "1.2" (the default) or "1.3".
	MinVersion string `yaml:"min_version"`
}

// ClientAuth values.
const (
	ClientAuthNone          = "none"
	ClientAuthRequire       = "require"
	ClientAuthVerifyIfGiven = "verify_if_given"
)

// errNoTrust says why a listener or client asking for TLS or the PROXY
// protocol is refused.
func errNoTrust(what string) error {
	return errors.New(what + " is package srcs/trust's, which this program does not link: " +
		`import _ "github.com/sluice-io/sluice/srcs/trust"`)
}

// server checks c for a listener and returns the server's side of its
// handshake. Errors name the YAML keys.
func (c *TLSConfig) server(log Logger) (trusthook.Handshake, error) {
	p := trusthook.Get()
	if p == nil {
		return nil, errNoTrust("tls")
	}
	return p.Server(trusthook.TLSConfig(*c), log)
}

// client checks c for a client of host and returns the client's side of
// its handshake. Errors name the YAML keys.
func (c *TLSConfig) client(host string, log Logger) (trusthook.Handshake, error) {
	p := trusthook.Get()
	if p == nil {
		return nil, errNoTrust("tls")
	}
	return p.Client(trusthook.TLSConfig(*c), host, log)
}
