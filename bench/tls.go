package bench

// TLS ingestion beside plaintext (run --tls).
//
// The kernels sluice targets have no kTLS, so every TLS source is read by
// the goroutine runner through crypto/tls, whatever the engine's runner
// (see engine.Config.Runner). run --tls therefore adds one row, RowTLS: an
// engine on the goroutine runner behind a TLS listener, the listener
// configured as a node file would configure it (srcs.TLSConfig), fed by
// the same generator over TLS. The row goes first, so that the ratios the
// report prints, the first row's to each other one, are TLS's cost against
// each plaintext runner measured in the same rounds: against the goroutine
// runner, the same read path without the decryption, and against the
// others, what moving a source to TLS costs.
//
// The certificate authority and the server's certificate are made when
// the run starts, into a temporary directory removed at its end. The
// generator dials every connection and finishes its handshake before the
// measured interval begins, and then writes through crypto/tls with one
// goroutine per connection (tls.Conn needs the Go netpoller's blocking
// writes, not the shards' non-blocking ones), as fast as the connection
// takes it: --tls is for unpaced runs.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// RowTLS is the row of run --tls: the goroutine runner, which carries every
// TLS source, behind a TLS listener.
const RowTLS = engine.RunnerGoroutine + "+tls"

// tlsNote is the report's note on a run with --tls.
const tlsNote = "tls: the " + RowTLS + " row is the goroutine runner (which reads every TLS source: there is no kTLS) behind a TLS listener " +
	"with a certificate made for the run; the generator dials and finishes every handshake before the interval, then writes through " +
	"crypto/tls, one goroutine per connection; the ratios are that row's to each plaintext row of the same rounds"

// goTLSNote is the report's note on a run with --tls --peers go.
const goTLSNote = "tls: the " + PeerGoTLS + " row is the go row's sink (Go's net package, a goroutine per connection) behind a crypto/tls " +
	"listener with the same certificate, fed by the same generator; " + PeerGoTLS + "/" + PeerGo + " is what TLS costs a sink written with Go alone"

// TLSFiles are the PEM files of a run's certificate authority and of the
// sink's certificate, signed by it for 127.0.0.1, ::1 and localhost.
type TLSFiles struct {
	CAFile   string `json:"ca_file"`
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// listener is the sink's TLS configuration, as a node file would give it.
func (f *TLSFiles) listener() *srcs.TLSConfig {
	if f == nil {
		return nil
	}
	return &srcs.TLSConfig{CertFile: f.CertFile, KeyFile: f.KeyFile}
}

// benchCA is a certificate authority made at run time (ECDSA P-256, valid
// for a day), for run --tls and the soak's TLS listener.
type benchCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	der    []byte
	serial int64
}

func newBenchCA(cn string) (*benchCA, error) {
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
	return &benchCA{cert: cert, key: key, der: der, serial: 1}, nil
}

// issue signs a certificate for subject CN=cn: a server's for 127.0.0.1,
// ::1 and localhost, or a client's. It returns the certificate and key
// as PEM and as a tls.Certificate.
func (ca *benchCA) issue(cn string, server bool) (certPEM, keyPEM []byte, tc tls.Certificate, err error) {
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

// pool is a certificate pool holding the CA.
func (ca *benchCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// makeTLSFiles makes a certificate authority and a server certificate in
// dir.
func makeTLSFiles(dir string) (*TLSFiles, error) {
	ca, err := newBenchCA("sluice-bench CA")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, _, err := ca.issue("sluice-bench sink", true)
	if err != nil {
		return nil, err
	}
	f := &TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "sink.pem"), KeyFile: filepath.Join(dir, "sink-key.pem")}
	for _, p := range []struct {
		file string
		b    []byte
	}{{f.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})}, {f.CertFile, certPEM}, {f.KeyFile, keyPEM}} {
		if err := os.WriteFile(p.file, p.b, 0o600); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// startTLSRun makes the run's certificates when c asks for TLS, and
// returns them with a function that removes them.
func startTLSRun(c RunConfig) (*TLSFiles, func(), error) {
	if !c.TLS {
		return nil, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "sluice-bench-tls-")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: --tls: %w", err)
	}
	f, err := makeTLSFiles(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("bench: --tls: certificates: %w", err)
	}
	return f, func() { os.RemoveAll(dir) }, nil
}

// validateTLS checks what run --tls can do, naming the flag at fault.
func (c RunConfig) validateTLS() error {
	if !c.TLS {
		return nil
	}
	switch {
	case c.Client != ClientGen:
		return errors.New("--tls: with the built-in generator only (--client gen)")
	case c.Rate > 0:
		return errors.New("--tls: unpaced runs only (no --rate): the generator writes TLS with blocking writes, as fast as each connection takes them")
	case slices.Contains(c.Peers, PeerGnet):
		return errors.New("--tls: not with --peers gnet (the gnet sink reads plaintext; --peers go adds a go+tls row)")
	}
	return nil
}

// tlsNotes are the report's notes on a run with --tls: what the TLS row
// is, and the sessions' version and cipher suite.
func (c RunConfig) tlsNotes(runs []*Result) []string {
	if !c.TLS {
		return nil
	}
	notes := []string{tlsNote}
	if slices.Contains(c.Peers, PeerGo) {
		notes = append(notes, goTLSNote)
	}
	for _, r := range runs {
		if r.TLS != "" {
			notes = append(notes, "tls: sessions of "+r.Runner+": "+r.TLS)
			break
		}
	}
	return notes
}

// tlsRows puts RowTLS first when c asks for TLS, and PeerGoTLS second
// when c also asks for PeerGo.
func (c RunConfig) tlsRows(rows []string) []string {
	if !c.TLS {
		return rows
	}
	first := []string{RowTLS}
	if slices.Contains(rows, PeerGo) {
		first = append(first, PeerGoTLS)
	}
	return append(first, rows...)
}

// tlsWorkload makes w the TLS row's when name is RowTLS: the goroutine
// runner behind a TLS listener with the run's certificate; and for
// PeerGoTLS, Go's sink behind one.
func tlsWorkload(w workload, name string, files *TLSFiles) workload {
	switch name {
	case RowTLS:
		w.Runner, w.TLS = engine.RunnerGoroutine, files
		w.Engine.TLS = files.listener()
	case PeerGoTLS:
		w.Runner, w.TLS = PeerGo, files
	}
	return w
}

// row is the name of w's row in the report.
func (w workload) row() string {
	if w.TLS != nil {
		return w.Runner + "+tls"
	}
	return w.Runner
}

// genTLSConfig is the generator's client configuration: the run's CA,
// and the server name its certificate holds.
func genTLSConfig(caFile string) (*tls.Config, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--tls-ca: %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}, nil
}

// tlsHandshake runs a dialled connection's TLS handshake within the dial
// timeout.
func tlsHandshake(ctx context.Context, c net.Conn, cfg *tls.Config) (*tls.Conn, error) {
	tc := tls.Client(c, cfg)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// tlsSession names a session's version and cipher suite for the report.
func tlsSession(c net.Conn) string {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return ""
	}
	cs := tc.ConnectionState()
	return tls.VersionName(cs.Version) + " " + tls.CipherSuiteName(cs.CipherSuite)
}

// runTLSBulk sends, for the duration from start, as fast as the sink takes
// it, on every connection of gcs through its TLS session in conns, one
// goroutine each, and returns the writes that sent bytes and the messages
// written. Each write is the connection's whole template (whole messages,
// so every stream ends on a message boundary), its headers stamped just
// before it as the shards stamp theirs; a write blocks until crypto/tls
// has handed every record to the kernel.
func runTLSBulk(gcs []*genConn, conns []net.Conn, size int, framed, crc bool, start time.Time, dur time.Duration) (writes, msgs uint64) {
	end := start.Add(dur).UnixNano()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, gc := range gcs {
		tc := conns[i].(*tls.Conn)
		wg.Go(func() {
			var w, m uint64
			for !gc.dead {
				now := time.Now().UnixNano()
				if now >= end {
					break
				}
				if !framed {
					for j := 0; j < len(gc.tmpl); j += size {
						binary.LittleEndian.PutUint64(gc.tmpl[j+sentOff:], uint64(now))
						binary.LittleEndian.PutUint64(gc.tmpl[j+schedOff:], uint64(now))
					}
				}
				n, err := tc.Write(gc.tmpl)
				if n > 0 {
					w++
					m += uint64(n / size)
					if crc {
						gc.crc = crc32.Update(gc.crc, castagnoli, gc.tmpl[:n])
					}
					gc.bytes += uint64(n)
					gc.onTime += uint64(n)
					gc.msgs += uint64(n / size)
				}
				if err != nil {
					gc.dead = true
				}
			}
			mu.Lock()
			writes += w
			msgs += m
			mu.Unlock()
		})
	}
	wg.Wait()
	return writes, msgs
}
