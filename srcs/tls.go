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
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultHandshakeTimeout bounds a listener's handshake (the PROXY header
// and the TLS handshake) when HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 10 * time.Second

// certCheckEvery is how often, at most, a handshake looks at the
// certificate files' modification times, so a renewed certificate is in
// use within a second of being written without a stat per handshake.
const certCheckEvery = time.Second

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
	kp, err := newKeyPair(c.CertFile, c.KeyFile, log)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: minV, GetCertificate: kp.getCertificate}
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
	cas, err := newClientCAs(c.CAFile, tc.Clone(), log)
	if err != nil {
		return nil, err
	}
	// The configuration each handshake uses comes from cas, with the
	// CAs in force; tc itself keeps the session ticket keys.
	tc.GetConfigForClient = cas.configForClient
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
		if tc.RootCAs, err = loadCAs(c.CAFile); err != nil {
			return nil, err
		}
	}
	if c.CertFile != "" {
		kp, err := newKeyPair(c.CertFile, c.KeyFile, log)
		if err != nil {
			return nil, err
		}
		tc.GetClientCertificate = kp.getClientCertificate
	}
	if c.InsecureSkipVerify && log != nil {
		log.Warn("srcs: tls.insecure_skip_verify: the server's certificate is not checked", "server", host)
	}
	return tc, nil
}

func loadCAs(file string) (*x509.CertPool, error) {
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
// certCheckEvery, from whichever handshake comes first after that. A load
// that fails keeps what was loaded before, and is logged once until the
// files change again. It is safe for concurrent use: handshakes on many
// goroutines call maybeReload.
type fileWatch struct {
	files []string
	keys  []string     // each file's YAML key, for errors
	what  string       // for the logs: "certificate", "client CA"
	load  func() error // reads the files and installs the result
	log   *slog.Logger

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
func (w *fileWatch) init(log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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

// maybeReload looks at the files at most once per certCheckEvery and
// loads them again if any changed.
func (w *fileWatch) maybeReload() {
	now := time.Now().UnixNano()
	last := w.checked.Load()
	if now-last < int64(certCheckEvery) || !w.checked.CompareAndSwap(last, now) {
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

// keyPair serves a certificate and key from files, loaded again when
// either changes (see fileWatch). It is safe for concurrent use.
type keyPair struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
	watch             fileWatch
}

func newKeyPair(certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	kp.watch = fileWatch{files: []string{certFile, keyFile}, keys: []string{"tls.cert_file", "tls.key_file"},
		what: "certificate", load: kp.load}
	if err := kp.watch.init(log); err != nil {
		return nil, err
	}
	return kp, nil
}

// load reads both files and installs the pair. Errors name the YAML key.
func (kp *keyPair) load() error {
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

func (kp *keyPair) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	kp.watch.maybeReload()
	return kp.cur.Load(), nil
}

func (kp *keyPair) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	kp.watch.maybeReload()
	return kp.cur.Load(), nil
}

// clientCAs is a listener's client-certificate verification, read from
// ca_file and read again when it changes (see fileWatch). Each handshake
// takes the configuration built from the CAs in force
// (tls.Config.GetConfigForClient), so a CA added to the file admits its
// clients from the next handshake on, and one removed stops admitting
// them, without touching open sessions. A resumed session is checked
// against the CAs in force too: crypto/tls verifies a resumed session's
// chains again with the configuration's ClientCAs. It is safe for
// concurrent use.
type clientCAs struct {
	file  string
	base  *tls.Config // everything but ClientCAs; never handed out
	cur   atomic.Pointer[tls.Config]
	watch fileWatch
}

func newClientCAs(file string, base *tls.Config, log *slog.Logger) (*clientCAs, error) {
	cc := &clientCAs{file: file, base: base}
	cc.watch = fileWatch{files: []string{file}, keys: []string{"tls.ca_file"}, what: "client CA", load: cc.load}
	if err := cc.watch.init(log); err != nil {
		return nil, err
	}
	return cc, nil
}

func (cc *clientCAs) load() error {
	pool, err := loadCAs(cc.file)
	if err != nil {
		return err
	}
	tc := cc.base.Clone()
	tc.ClientCAs = pool
	cc.cur.Store(tc)
	return nil
}

// configForClient is the listener's GetConfigForClient.
func (cc *clientCAs) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	cc.watch.maybeReload()
	return cc.cur.Load(), nil
}

// peerSubject returns the subject of a session's verified client
// certificate, or "" if it sent none.
func peerSubject(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.String()
}
