package srcs

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluice-io/sluice/internal/certs"
)

// The MQTT source's TLS, which it configures itself: srcs/trust has the
// same, and the listeners and the TCP and unix clients use that.

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
