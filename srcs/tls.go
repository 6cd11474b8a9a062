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
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-io/sluice/internal/certs"
)

// DefaultHandshakeTimeout bounds a listener's handshake (the PROXY header
// and the TLS handshake) when HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 10 * time.Second

// TLSConfig configures TLS on a listener (as the server) or on a TCP or
// MQTT client. Keys are named as they appear in YAML under a tls: section.
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

// minVersion parses MinVersion.
func (c *TLSConfig) minVersion() (uint16, error) {
	switch c.MinVersion {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("tls.min_version: %q: must be 1.2 or 1.3", c.MinVersion)
}

// serverConfig checks c for a listener and builds its crypto/tls
// configuration. Errors name the YAML keys.
func (c *TLSConfig) serverConfig(log *slog.Logger) (*tls.Config, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, errors.New("tls: cert_file and key_file are required on a listener")
	}
	if c.ServerName != "" || c.InsecureSkipVerify {
		return nil, errors.New("tls: server_name and insecure_skip_verify are for clients, not listeners")
	}
	minV, err := c.minVersion()
	if err != nil {
		return nil, err
	}
	kp, err := certs.NewKeyPair(c.CertFile, c.KeyFile, log)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: minV, GetCertificate: kp.GetCertificate}
	switch c.ClientAuth {
	case "", ClientAuthNone:
		if c.CAFile != "" {
			return nil, errors.New("tls.ca_file: set without client_auth (require or verify_if_given)")
		}
		return tc, nil
	case ClientAuthRequire:
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	case ClientAuthVerifyIfGiven:
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	default:
		return nil, fmt.Errorf("tls.client_auth: %q: must be none, require or verify_if_given", c.ClientAuth)
	}
	if c.CAFile == "" {
		return nil, fmt.Errorf("tls.ca_file: required with client_auth %s", c.ClientAuth)
	}
	cas, err := certs.NewClientCAs(c.CAFile, tc.Clone(), log)
	if err != nil {
		return nil, err
	}
	// The configuration each handshake uses comes from cas, with the
	// CAs in force; tc itself keeps the session ticket keys.
	tc.GetConfigForClient = cas.ConfigForClient
	return tc, nil
}

// ClientConfig checks c for a client and builds its crypto/tls
// configuration, for clients outside this package (a NATS connection).
// host is the server's name to verify unless ServerName is set; "" leaves
// it to the dialer. Errors name the YAML keys under tls.
func (c *TLSConfig) ClientConfig(host string) (*tls.Config, error) {
	return c.clientConfig(host, nil)
}

// clientConfig checks c for a client dialing addr's host and builds its
// crypto/tls configuration.
func (c *TLSConfig) clientConfig(host string, log *slog.Logger) (*tls.Config, error) {
	if c.ClientAuth != "" {
		return nil, errors.New("tls.client_auth: for listeners, not clients")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: cert_file and key_file go together")
	}
	minV, err := c.minVersion()
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: minV, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	if c.CAFile != "" {
		if tc.RootCAs, err = certs.LoadCAs(c.CAFile); err != nil {
			return nil, err
		}
	}
	if c.CertFile != "" {
		kp, err := certs.NewKeyPair(c.CertFile, c.KeyFile, log)
		if err != nil {
			return nil, err
		}
		tc.GetClientCertificate = kp.GetClientCertificate
	}
	if c.InsecureSkipVerify && log != nil {
		log.Warn("srcs: tls.insecure_skip_verify: the server's certificate is not checked", "server", host)
	}
	return tc, nil
}
