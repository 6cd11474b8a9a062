package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// CheckEvery is how often, at most, a handshake looks at the
// certificate files' modification times, so a renewed certificate is in
// use within a second of being written without a stat per handshake.
const CheckEvery = time.Second

// LoadCAs reads a PEM bundle of CA certificates. Errors name the YAML key
// tls.ca_file.
func LoadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls.ca_file: %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// fileWatch loads something from files again when any of them changes
// on disk (its size or modification time), looking at most once per
// CheckEvery, from whichever handshake comes first after that. A load
// that fails keeps what was loaded before, and is logged once until the
// files change again. It is safe for concurrent use: handshakes on many
// goroutines call maybeReload.
// Logger is what a reload reports through; *slog.Logger is one.
type Logger interface {
	Info(msg string, args ...any)
	Error(msg string, args ...any)
}

// discard is the Logger of a nil log.
type discard struct{}

func (discard) Info(string, ...any)  {}
func (discard) Error(string, ...any) {}

type fileWatch struct {
	files []string
	keys  []string     // each file's YAML key, for errors
	what  string       // for the logs: "certificate", "client CA"
	load  func() error // reads the files and installs the result
	log   Logger

	checked atomic.Int64 // unix nanoseconds of the last look at the files

	mu      sync.Mutex // serialises reloads
	stamps  []fileStamp
	lastErr string // the last reload error logged, so a bad file logs once
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func stampOf(file string) (fileStamp, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.Size(), fi.ModTime()}, nil
}

// init loads the files for the first time; its error fails New.
func (w *fileWatch) init(log Logger) error {
	if log == nil {
		log = discard{}
	}
	w.log = log
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.reloadLocked(); err != nil {
		return err
	}
	w.checked.Store(time.Now().UnixNano())
	return nil
}

// reloadLocked stamps the files, then loads them. Stamping first means a
// file written during the load is loaded again at the next look.
func (w *fileWatch) reloadLocked() error {
	stamps := make([]fileStamp, len(w.files))
	for i, f := range w.files {
		st, err := stampOf(f)
		if err != nil {
			return fmt.Errorf("%s: %w", w.keys[i], err)
		}
		stamps[i] = st
	}
	if err := w.load(); err != nil {
		return err
	}
	w.stamps = stamps
	return nil
}

// changedLocked says whether any file's stamp differs from the last load's
// (or cannot be read: the load then says why).
func (w *fileWatch) changedLocked() bool {
	for i, f := range w.files {
		st, err := stampOf(f)
		if err != nil || st != w.stamps[i] {
			return true
		}
	}
	return false
}

// maybeReload looks at the files at most once per CheckEvery and
// loads them again if any changed.
func (w *fileWatch) maybeReload() {
	now := time.Now().UnixNano()
	last := w.checked.Load()
	if now-last < int64(CheckEvery) || !w.checked.CompareAndSwap(last, now) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.changedLocked() {
		return
	}
	if err := w.reloadLocked(); err != nil {
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			w.log.Error("srcs: tls: reloading the "+w.what+" failed; the previous one stays in use", "err", err)
		}
		return
	}
	w.lastErr = ""
	w.log.Info("srcs: tls: "+w.what+" reloaded", "file", w.files[0])
}

// KeyPair serves a certificate and key from files, loaded again when
// either changes (see fileWatch). It is safe for concurrent use.
type KeyPair struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
	watch             fileWatch
}

// NewKeyPair loads the pair for the first time; its error names the YAML
// key of the file that failed. log may be nil.
func NewKeyPair(certFile, keyFile string, log Logger) (*KeyPair, error) {
	kp := &KeyPair{certFile: certFile, keyFile: keyFile}
	kp.watch = fileWatch{files: []string{certFile, keyFile}, keys: []string{"tls.cert_file", "tls.key_file"},
		what: "certificate", load: kp.load}
	if err := kp.watch.init(log); err != nil {
		return nil, err
	}
	return kp, nil
}

// load reads both files and installs the pair. Errors name the YAML key.
func (kp *KeyPair) load() error {
	certPEM, err := os.ReadFile(kp.certFile)
	if err != nil {
		return fmt.Errorf("tls.cert_file: %w", err)
	}
	keyPEM, err := os.ReadFile(kp.keyFile)
	if err != nil {
		return fmt.Errorf("tls.key_file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("tls.cert_file %s, tls.key_file %s: %w", kp.certFile, kp.keyFile, err)
	}
	kp.cur.Store(&cert)
	return nil
}

// GetCertificate is a server's tls.Config.GetCertificate.
func (kp *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	kp.watch.maybeReload()
	return kp.cur.Load(), nil
}

// GetClientCertificate is a client's tls.Config.GetClientCertificate.
func (kp *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	kp.watch.maybeReload()
	return kp.cur.Load(), nil
}

// ClientCAs is a listener's client-certificate verification, read from
// ca_file and read again when it changes (see fileWatch). Each handshake
// takes the configuration built from the CAs in force
// (tls.Config.GetConfigForClient), so a CA added to the file admits its
// clients from the next handshake on, and one removed stops admitting
// them, without touching open sessions. A resumed session is checked
// against the CAs in force too: crypto/tls verifies a resumed session's
// chains again with the configuration's ClientCAs. It is safe for
// concurrent use.
type ClientCAs struct {
	file  string
	base  *tls.Config // everything but ClientCAs; never handed out
	cur   atomic.Pointer[tls.Config]
	watch fileWatch
}

// NewClientCAs loads file for the first time into a copy of base, which
// it never hands out. log may be nil.
func NewClientCAs(file string, base *tls.Config, log Logger) (*ClientCAs, error) {
	cc := &ClientCAs{file: file, base: base}
	cc.watch = fileWatch{files: []string{file}, keys: []string{"tls.ca_file"}, what: "client CA", load: cc.load}
	if err := cc.watch.init(log); err != nil {
		return nil, err
	}
	return cc, nil
}

func (cc *ClientCAs) load() error {
	pool, err := LoadCAs(cc.file)
	if err != nil {
		return err
	}
	tc := cc.base.Clone()
	tc.ClientCAs = pool
	cc.cur.Store(tc)
	return nil
}

// ConfigForClient is the listener's tls.Config.GetConfigForClient.
func (cc *ClientCAs) ConfigForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	cc.watch.maybeReload()
	return cc.cur.Load(), nil
}

// PeerSubject returns the subject of a session's verified client
// certificate, or "" if it sent none.
func PeerSubject(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.String()
}
