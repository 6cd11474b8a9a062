package soak

import (
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/srcs"

	// TLS and the PROXY protocol of the trust listeners.
	_ "github.com/sluice-io/sluice/srcs/trust"
)

// The soak's trust load (trustLoad): hostile peers at a TLS listener and a
// PROXY listener of the engine, all through the soak, beside well-behaved
// TLS and proxied streams that the checker pairs and checks like the
// others. Every hostile peer must be refused and counted by its reason,
// exactly: at the end, each listener's stats must equal what was sent.
// That nothing they took stays behind (goroutines, descriptors, pool
// buffers, sources) the soak's levels check, as for every load.
//
// The kinds of hostile peer, one after the other at --trust-rate:
//
//   - plaintext: an HTTP request instead of a ClientHello;
//   - garbage: random bytes that no TLS record starts with;
//   - silent: a connection that never says anything; every
//     soakTrustFloodEvery a flood of soakTrustFlood of them comes at
//     once, more than the listener's max_handshakes;
//   - slow: a real ClientHello, a byte every soakTrustSlowPause, which
//     never finishes within the handshake timeout;
//   - alien: a client certificate signed by another CA;
//   - forged: a PROXY header from an address that is not a trusted proxy.
//
// The addresses: the stream load binds 127.a.b.c with a, b, c from 1 to
// 254, so the trust load keeps to 127.255.0.0/16: the trusted proxy is
// soakProxyIP, the forger soakForgerIP, and each well-behaved TLS client
// binds an address of its own in 127.255.1.1 and up, so that its name is
// unique while it is in flight, as the checker needs.

// DefaultSoakTrustRate is --trust-rate's default: hostile peers per
// second.
const DefaultSoakTrustRate = 40

const (
	soakTrustTimeout       = 3 * time.Second // the listeners' handshake_timeout
	soakTrustMaxHandshakes = 64
	soakTrustFlood         = 100
	soakTrustFloodEvery    = 10 * time.Second
	soakTrustSlowPause     = 100 * time.Millisecond
	soakTrustClientCN      = "soak-client"
	soakTrustSeedBase      = 1 << 48 // the good streams' numbers, apart from the stream load's
)

var (
	soakProxyIP  = net.IPv4(127, 255, 0, 1)
	soakForgerIP = net.IPv4(127, 255, 0, 2)
)

// hostileKind is a kind of hostile peer.
type hostileKind uint8

const (
	hostPlaintext hostileKind = iota
	hostGarbage
	hostSilent
	hostSlow
	hostAlien
	hostForged
	numHostile
)

var hostileNames = [numHostile]string{"plaintext", "garbage", "silent", "slow", "alien_cert", "forged_proxy"}

// trustSinks are the engine's listeners of the trust load, and the
// clients' TLS configurations.
type trustSinks struct {
	tls, proxy         *srcs.Listener
	tlsAddr, proxyAddr string
	good, alien        *tls.Config
}

// setupTrust makes a CA, the TLS listener's certificate and a client's,
// and a stranger CA's client certificate, and adds the TLS listener
// (client certificates verified if given) and the PROXY listener to the
// engine.
func (r *soakRun) setupTrust(log *slog.Logger) error {
	ca, err := harness.NewCA("sluice-soak CA")
	if err != nil {
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	other, err := harness.NewCA("stranger CA")
	if err != nil {
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	srvPEM, srvKey, _, err := ca.Issue("sluice-soak", true)
	if err != nil {
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	_, _, client, err := ca.Issue(soakTrustClientCN, false)
	if err != nil {
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	_, _, alien, err := other.Issue("intruder", false)
	if err != nil {
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	files := harness.TLSFiles{CAFile: filepath.Join(r.dir, "trust-ca.pem"), CertFile: filepath.Join(r.dir, "trust.pem"), KeyFile: filepath.Join(r.dir, "trust-key.pem")}
	for _, f := range []struct {
		path string
		b    []byte
	}{{files.CAFile, pemCert(ca)}, {files.CertFile, srvPEM}, {files.KeyFile, srvKey}} {
		if err := os.WriteFile(f.path, f.b, 0o600); err != nil {
			return fmt.Errorf("bench: soak: trust: %w", err)
		}
	}
	// X25519 alone: the default hybrid post-quantum key exchange costs
	// several times the CPU, which a soak under the race detector may not
	// give a good client within the handshake timeout.
	curves := []tls.CurveID{tls.X25519}
	ts := &trustSinks{
		good: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{client}, CurvePreferences: curves},
		alien: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", CurvePreferences: curves,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &alien, nil }},
	}
	ts.tls, err = srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{Logger: log, HandshakeTimeout: soakTrustTimeout, MaxHandshakes: soakTrustMaxHandshakes,
		TLS: &srcs.TLSConfig{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile, ClientAuth: srcs.ClientAuthVerifyIfGiven}})
	if err != nil {
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	if err := r.e.AddListener(ts.tls); err != nil {
		ts.tls.Close()
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	ts.proxy, err = srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{Logger: log, HandshakeTimeout: soakTrustTimeout,
		ProxyProtocol: &srcs.ProxyProtocolConfig{Trusted: []string{soakProxyIP.String()}}})
	if err != nil {
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	if err := r.e.AddListener(ts.proxy); err != nil {
		ts.proxy.Close()
		return fmt.Errorf("bench: soak: trust: %w", err)
	}
	ts.tlsAddr, ts.proxyAddr = ts.tls.Addr().String(), ts.proxy.Addr().String()
	r.trustS = ts
	return nil
}

func pemCert(ca *harness.CA) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.DER})
}

// trustLoad runs the hostile peers and the well-behaved streams of the
// trust load.
type trustLoad struct {
	cfg   Config
	s     *trustSinks
	chk   *soakChecker
	sent  [numHostile]atomic.Uint64
	good  [2]atomic.Uint64 // well-behaved TLS, proxied streams opened
	seq   atomic.Uint64    // numbers the well-behaved streams
	bytes atomic.Uint64    // written by them
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func startTrustLoad(c Config, s *trustSinks, chk *soakChecker) *trustLoad {
	l := &trustLoad{cfg: c, s: s, chk: chk, done: make(chan struct{})}
	l.wg.Go(l.run)
	return l
}

// stop ends the load and waits for every peer to be done.
func (l *trustLoad) stop() {
	l.once.Do(func() { close(l.done) })
	l.wg.Wait()
}

// run starts a hostile peer every tick, the kinds in turn, and a
// well-behaved stream every other tick, TLS and proxied in turn, plus a
// flood of silent handshakes every soakTrustFloodEvery.
func (l *trustLoad) run() {
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.cfg.TrustRate))
	defer tick.Stop()
	flood := time.NewTicker(soakTrustFloodEvery)
	defer flood.Stop()
	for n := uint64(0); ; n++ {
		select {
		case <-l.done:
			return
		case <-flood.C:
			for range soakTrustFlood {
				l.wg.Go(func() { l.hostile(hostSilent, 0) })
			}
			continue
		case <-tick.C:
		}
		kind := hostileKind(n % uint64(numHostile))
		l.wg.Go(func() { l.hostile(kind, n) })
		if n%2 == 0 {
			proxied := n%4 == 2
			l.wg.Go(func() { l.goodStream(proxied) })
		}
	}
}

// hostile plays one hostile peer of kind, counted once it reached the
// listener, and hangs on until the listener throws it out.
func (l *trustLoad) hostile(kind hostileKind, n uint64) {
	addr, d := l.s.tlsAddr, net.Dialer{Timeout: 10 * time.Second}
	if kind == hostForged {
		addr, d.LocalAddr = l.s.proxyAddr, &net.TCPAddr{IP: soakForgerIP}
	}
	if kind == hostAlien {
		c, err := tls.DialWithDialer(&d, "tcp", addr, l.s.alien)
		l.sent[kind].Add(1)
		if err != nil {
			return // refused in the handshake (TLS 1.2)
		}
		c.Write([]byte("let me in")) // TLS 1.3: refused once the server reads the certificate
		hangOn(c)
		return
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		l.chk.failf("trust: %s peer: dial %s: %v", hostileNames[kind], addr, err)
		return
	}
	l.sent[kind].Add(1)
	switch kind {
	case hostPlaintext:
		c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: ingest\r\n\r\n"))
	case hostGarbage:
		rng := rand.New(rand.NewPCG(l.cfg.Seed, n))
		junk := make([]byte, 5+rng.IntN(4096))
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		junk[0] |= 0x80 // no TLS record starts so: refused at its header
		c.Write(junk)
	case hostSlow:
		tc := tls.Client(slowConn{c, soakTrustSlowPause, l.done}, l.s.good)
		tc.SetDeadline(time.Now().Add(soakTrustTimeout + 10*time.Second))
		if err := tc.Handshake(); err == nil {
			l.chk.failf("trust: a handshake at a byte every %v finished within the %v handshake timeout", soakTrustSlowPause, soakTrustTimeout)
		}
	case hostForged:
		src := &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 4242}
		hdr, _ := proxyproto.HeaderProxyFromAddrs(byte(1+n%2), src, c.LocalAddr()).Format()
		c.Write(append(hdr, "forged"...))
	}
	hangOn(c)
}

// hangOn reads c until the other side closes it, then closes it.
func hangOn(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(soakTrustTimeout + 10*time.Second))
	io.Copy(io.Discard, c)
	c.Close()
}

// slowConn writes one byte at a time with a pause between, as a
// slowloris sends its ClientHello; it gives up when done is closed.
type slowConn struct {
	net.Conn
	pause time.Duration
	done  <-chan struct{}
}

func (w slowConn) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := w.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
		select {
		case <-time.After(w.pause): // the peer's pace
		case <-w.done:
			return i + 1, net.ErrClosed
		}
	}
	return len(p), nil
}

// goodStream opens a well-behaved stream, TLS with the client certificate
// or through the trusted proxy, writes its seeded bytes and closes it;
// the checker pairs it by the name the engine gives it.
func (l *trustLoad) goodStream(proxied bool) {
	i := l.seq.Add(1)
	k := soakTrustSeedBase + i
	rng := rand.New(rand.NewPCG(l.cfg.Seed, k))
	r := &clientRec{k: k, end: endClose}
	var c net.Conn
	var err error
	if proxied {
		d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: soakProxyIP}}
		c, err = d.Dial("tcp", l.s.proxyAddr)
		if err == nil {
			orig := &net.TCPAddr{IP: net.IPv4(198, 18, byte(i>>8), byte(i)), Port: 1024 + int(i>>16)%60000}
			var hdr []byte
			if hdr, err = proxyproto.HeaderProxyFromAddrs(byte(1+i%2), orig, c.LocalAddr()).Format(); err == nil {
				_, err = c.Write(hdr)
			}
			r.name = "tcp://" + orig.String()
		}
		l.good[1].Add(1)
	} else {
		ip := net.IPv4(127, 255, byte(1+(i/254)%254), byte(1+i%254))
		d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
		var tc *tls.Conn
		tc, err = tls.DialWithDialer(&d, "tcp", l.s.tlsAddr, l.s.good)
		if err == nil {
			c, r.name = tc, "tls://"+tc.LocalAddr().String()+" [CN="+soakTrustClientCN+"]"
		}
		l.good[0].Add(1)
	}
	if err != nil {
		l.chk.failf("trust: a well-behaved %s stream: %v", map[bool]string{true: "proxied", false: "TLS"}[proxied], err)
		if c != nil {
			c.Close()
		}
		return
	}
	l.chk.clientOpened(r)
	s := newSoakStream(l.chk.seed, k)
	buf := make([]byte, soakMaxWrite)
	for left := logUniform(rng, int64(l.cfg.ConnBytes)); left > 0; {
		n := int(min(left, 1+rng.Int64N(soakMaxWrite)))
		s.fill(buf[:n])
		if _, err := c.Write(buf[:n]); err != nil {
			r.problem = fmt.Sprintf("write: %v", err)
			break
		}
		r.written += int64(n)
		r.crc = crc32.Update(r.crc, castagnoli, buf[:n])
		left -= int64(n)
	}
	l.bytes.Add(uint64(r.written))
	if err := c.Close(); err != nil && r.problem == "" {
		r.problem = fmt.Sprintf("close: %v", err)
	}
	l.chk.clientDone(r)
}

// settle waits, until deadline, for each listener to have counted every
// hostile peer by its reason and let in every well-behaved stream, and
// reports what differs.
func (l *trustLoad) settle(deadline time.Time, failf func(string, ...any)) {
	wantTLS, wantProxy := l.want()
	ok := waitUntil(deadline, func() bool { return l.s.tls.Stats() == wantTLS && l.s.proxy.Stats() == wantProxy })
	if !ok {
		if got := l.s.tls.Stats(); got != wantTLS {
			failf("trust: the TLS listener counted %+v; the peers sent make %+v", got, wantTLS)
		}
		if got := l.s.proxy.Stats(); got != wantProxy {
			failf("trust: the PROXY listener counted %+v; the peers sent make %+v", got, wantProxy)
		}
	}
}

// want is what each listener must have counted.
func (l *trustLoad) want() (tlsWant, proxyWant srcs.ListenerStats) {
	n := func(k hostileKind) uint64 { return l.sent[k].Load() }
	tlsWant = srcs.ListenerStats{Accepted: l.good[0].Load(), TLSFailures: n(hostPlaintext) + n(hostGarbage),
		HandshakeTimeouts: n(hostSilent) + n(hostSlow), CertRejected: n(hostAlien)}
	// A forged header that came after the listener's first look made a
	// source before it was refused: counted both ways.
	proxyWant = srcs.ListenerStats{Accepted: l.good[1].Load() + l.chk.lateRefused.Load(), ProxyRefused: n(hostForged)}
	return tlsWant, proxyWant
}

// SoakTrust reports the trust load: the hostile peers sent by kind, the
// listeners' counts (which must be what the peers sent make), and the
// well-behaved streams, opened and checked.
type SoakTrust struct {
	Enabled       bool              `json:"enabled"`
	Hostile       map[string]uint64 `json:"hostile"`
	TLSListener   map[string]uint64 `json:"tls_listener"`
	ProxyListener map[string]uint64 `json:"proxy_listener"`
	GoodTLS       uint64            `json:"good_tls"`
	GoodProxied   uint64            `json:"good_proxied"`
	GoodVerified  uint64            `json:"good_verified"`
	GoodBytes     uint64            `json:"good_bytes"`
	// ForgedLate counts forged headers that came after the PROXY
	// listener's first look at the connection: each made a source (an
	// accept) that the header then ended, with no byte delivered.
	ForgedLate uint64 `json:"forged_late"`
}

func listenerCounts(s srcs.ListenerStats) map[string]uint64 {
	return map[string]uint64{"accepted": s.Accepted, "denied": s.Denied, "proxy_refused": s.ProxyRefused,
		"handshake_timeout": s.HandshakeTimeouts, "tls_failed": s.TLSFailures, "cert_rejected": s.CertRejected}
}

func (l *trustLoad) report() SoakTrust {
	t := SoakTrust{Enabled: true, Hostile: map[string]uint64{}, TLSListener: listenerCounts(l.s.tls.Stats()),
		ProxyListener: listenerCounts(l.s.proxy.Stats()), GoodTLS: l.good[0].Load(), GoodProxied: l.good[1].Load(),
		GoodVerified: l.chk.trustVerified.Load(), GoodBytes: l.bytes.Load(), ForgedLate: l.chk.lateRefused.Load()}
	for k, name := range hostileNames {
		t.Hostile[name] = l.sent[k].Load()
	}
	return t
}
