package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// TLSFiles are the PEM files of a run's certificate authority and of the
// sink's certificate, signed by it for 127.0.0.1, ::1 and localhost.
type TLSFiles struct {
	CAFile   string `json:"ca_file"`
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// Listener is the sink's TLS configuration, as a node file would give it.
func (f *TLSFiles) Listener() *srcs.TLSConfig {
	if f == nil {
		return nil
	}
	return &srcs.TLSConfig{CertFile: f.CertFile, KeyFile: f.KeyFile}
}

// CA is a certificate authority made at run time (ECDSA P-256, valid
// for a day), for run --tls and the soak's TLS listener.
type CA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	DER    []byte
	serial int64
}

func NewCA(cn string) (*CA, error) {
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, DER: der, serial: 1}, nil
}

// Issue signs a certificate for subject CN=cn: a server's for 127.0.0.1,
// ::1 and localhost, or a client's. It returns the certificate and key
// as PEM and as a tls.Certificate.
func (ca *CA) Issue(cn string, server bool) (certPEM, keyPEM []byte, tc tls.Certificate, err error) {
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, tc, err
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, tc, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, tc, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	tc, err = tls.X509KeyPair(certPEM, keyPEM)
	return certPEM, keyPEM, tc, err
}

// Pool is a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// MakeTLSFiles makes a certificate authority and a server certificate in
// dir.
func MakeTLSFiles(dir string) (*TLSFiles, error) {
	ca, err := NewCA("sluice-bench CA")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, _, err := ca.Issue("sluice-bench sink", true)
	if err != nil {
		return nil, err
	}
	f := &TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "sink.pem"), KeyFile: filepath.Join(dir, "sink-key.pem")}
	for _, p := range []struct {
		file string
		b    []byte
	}{{f.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.DER})}, {f.CertFile, certPEM}, {f.KeyFile, keyPEM}} {
		if err := os.WriteFile(p.file, p.b, 0o600); err != nil {
			return nil, err
		}
	}
	return f, nil
}
