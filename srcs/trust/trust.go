package trust

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/sluice-io/sluice/internal/wire/certs"
	"github.com/sluice-io/sluice/internal/wire/trusthook"
	"github.com/sluice-io/sluice/srcs"
)

func init() { trusthook.Register(provider{}) }

// provider is what srcs asks of TLS and the PROXY protocol.
type provider struct{}

var _ trusthook.Provider = provider{}

// Server implements trusthook.Provider: it checks c for a listener and
// builds its crypto/tls configuration. Errors name the YAML keys.
func (provider) Server(c trusthook.TLSConfig, log trusthook.Logger) (trusthook.Handshake, error) {
	tc, err := serverConfig(c, log)
	if err != nil {
		return nil, err
	}
	return serverSide{tc}, nil
}

// Client implements trusthook.Provider.
func (provider) Client(c trusthook.TLSConfig, host string, log trusthook.Logger) (trusthook.Handshake, error) {
	tc, err := clientConfig(c, host, log)
	if err != nil {
		return nil, err
	}
	return clientSide{tc}, nil
}

// ProxyAddr implements trusthook.Provider: it parses a header the listener
// read whole, and returns the original client's address, or nil when the
// header names none (a LOCAL command, such as a proxy's health check, or
// an UNKNOWN family): the connection then stands for the proxy itself.
func (provider) ProxyAddr(header []byte) (net.Addr, error) {
	h, err := proxyproto.Read(bufio.NewReaderSize(bytes.NewReader(header), len(header)))
	if err != nil {
		return nil, err
	}
	if !h.Command.IsProxy() {
		return nil, nil
	}
	src, _, ok := h.TCPAddrs()
	if !ok {
		return nil, nil
	}
	return src, nil
}

// serverSide runs a listener's handshakes.
type serverSide struct{ tc *tls.Config }

func (s serverSide) Run(ctx context.Context, c net.Conn) (net.Conn, string, error) {
	tc := tls.Server(c, s.tc)
	if err := tc.HandshakeContext(ctx); err != nil {
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) || strings.Contains(err.Error(), "client didn't provide a certificate") {
			err = fmt.Errorf("%w: %w", trusthook.ErrCertRejected, err)
		}
		return nil, "", err
	}
	return tc, certs.PeerSubject(tc.ConnectionState()), nil
}

// clientSide runs a client's handshakes.
type clientSide struct{ tc *tls.Config }

func (s clientSide) Run(ctx context.Context, c net.Conn) (net.Conn, string, error) {
	tc := tls.Client(c, s.tc)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, "", err
	}
	return tc, "", nil
}

// ClientConfig checks c for a client and builds its crypto/tls
// configuration, for clients outside package srcs (a NATS connection).
// host is the server's name to verify unless c.ServerName is set; ""
// leaves it to the dialer. Errors name the YAML keys under tls.
func ClientConfig(c *srcs.TLSConfig, host string) (*tls.Config, error) {
	return clientConfig(trusthook.TLSConfig(*c), host, nil)
}

// minVersion parses MinVersion.
func minVersion(c trusthook.TLSConfig) (uint16, error) {
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
func serverConfig(c trusthook.TLSConfig, log trusthook.Logger) (*tls.Config, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, errors.New("tls: cert_file and key_file are required on a listener")
	}
	if c.ServerName != "" || c.InsecureSkipVerify {
		return nil, errors.New("tls: server_name and insecure_skip_verify are for clients, not listeners")
	}
	minV, err := minVersion(c)
	if err != nil {
		return nil, err
	}
	kp, err := certs.NewKeyPair(c.CertFile, c.KeyFile, log)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: minV, GetCertificate: kp.GetCertificate}
	switch c.ClientAuth {
	case "", srcs.ClientAuthNone:
		if c.CAFile != "" {
			return nil, errors.New("tls.ca_file: set without client_auth (require or verify_if_given)")
		}
		return tc, nil
	case srcs.ClientAuthRequire:
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	case srcs.ClientAuthVerifyIfGiven:
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

// clientConfig checks c for a client dialing host and builds its
// crypto/tls configuration.
func clientConfig(c trusthook.TLSConfig, host string, log trusthook.Logger) (*tls.Config, error) {
	if c.ClientAuth != "" {
		return nil, errors.New("tls.client_auth: for listeners, not clients")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: cert_file and key_file go together")
	}
	minV, err := minVersion(c)
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
