// Package testca makes a certificate authority and certificates at run
// time for TLS tests, and writes them as PEM files the way an operator's
// configuration names them.
package testca

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
	"sync/atomic"
	"testing"
	"time"
)

// CA is a self-signed certificate authority. It is safe for concurrent
// use.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CAFile is the CA's certificate as a PEM file.
	CAFile string
	dir    string
}

var serial atomic.Int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// New makes a CA named cn whose files live in a temporary directory.
func New(t testing.TB, cn string) *CA {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: k, dir: t.TempDir()}
	ca.CAFile = filepath.Join(ca.dir, cn+"-ca.pem")
	writePEM(t, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// Pool returns a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is a certificate signed by a CA, with its files.
type Leaf struct {
	TLS      tls.Certificate
	Cert     *x509.Certificate
	CertFile string
	KeyFile  string
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB, cn string) *Leaf {
	return ca.issue(t, cn, "", x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate with subject CN=cn, O=org.
func (ca *CA) Client(t testing.TB, cn, org string) *Leaf {
	return ca.issue(t, cn, org, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, cn, org string, usage x509.ExtKeyUsage) *Leaf {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if org != "" {
		tmpl.Subject.Organization = []string{org}
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{
		TLS:      tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: cert},
		Cert:     cert,
		CertFile: filepath.Join(ca.dir, cn+"-"+cert.SerialNumber.String()+".pem"),
		KeyFile:  filepath.Join(ca.dir, cn+"-"+cert.SerialNumber.String()+"-key.pem"),
	}
	writePEM(t, l.CertFile, "CERTIFICATE", der)
	writePEM(t, l.KeyFile, "EC PRIVATE KEY", kder)
	return l
}

// CopyTo writes the leaf's certificate and key over the files at certFile
// and keyFile, as a renewal would.
func (l *Leaf) CopyTo(t testing.TB, certFile, keyFile string) {
	t.Helper()
	for _, p := range [][2]string{{l.CertFile, certFile}, {l.KeyFile, keyFile}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
