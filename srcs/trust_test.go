package srcs_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/internal/testkit/testca"
	"github.com/sluice-io/sluice/srcs"
)

// dialFrom connects to addr from the loopback address from (Linux routes
// all of 127.0.0.0/8 to lo), so one host can play a proxy and a client.
func dialFrom(t *testing.T, from string, addr net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refusals waits for a listener's refusal logs.
type refusals struct {
	t   *testing.T
	log logRecords
}

func newRefusals(t *testing.T) (*refusals, *slog.Logger) {
	r := &refusals{t: t, log: make(logRecords, 64)}
	return r, slog.New(r.log)
}

// next waits for the next refusal and returns its reason.
func (r *refusals) next() string {
	r.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case rec := <-r.log:
			if strings.HasPrefix(rec.Message, "srcs: connection refused") {
				return attr(rec, "reason").String()
			}
		case <-timeout:
			r.t.Fatal("no refusal logged within 10s")
		}
	}
}

// acceptOne accepts one connection within 10s.
func acceptOne(t *testing.T, l *srcs.Listener) srcs.Source {
	t.Helper()
	return waitAccept(t, acceptAsync(context.Background(), l), 10*time.Second)
}

// tlsSetup is a CA, a server certificate and client certificates from the
// CA and from a stranger's CA.
type tlsSetup struct {
	ca, other     *testca.CA
	server        *testca.Leaf
	client, alien *testca.Leaf
}

func newTLSSetup(t *testing.T) tlsSetup {
	ca, other := testca.New(t, "sluice-test"), testca.New(t, "stranger")
	return tlsSetup{
		ca: ca, other: other,
		server: ca.Server(t, "server"),
		client: ca.Client(t, "sensor-7", "Acme"),
		alien:  other.Client(t, "intruder", "Elsewhere"),
	}
}

func (s tlsSetup) dial(t *testing.T, addr net.Addr, cert *testca.Leaf) (*tls.Conn, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.ca.Pool(), ServerName: "localhost"}
	if cert != nil {
		// Sent whatever CAs the server names, as a hostile client would.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	c, err := d.DialContext(context.Background(), "tcp", addr.String())
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c.(*tls.Conn), nil
}

// TestTLSListenerClientAuth runs real TLS sessions against each
// client_auth mode, with a good client certificate, none, and one from
// another CA.
func TestTLSListenerClientAuth(t *testing.T) {
	s := newTLSSetup(t)
	subject := "CN=sensor-7,O=Acme"
	cases := []struct {
		mode   string
		cert   *testca.Leaf
		reason string // "" when accepted
		ident  string
	}{
		{"none", nil, "", ""},
		{"none", s.client, "", ""}, // not asked for: not sent, no identity
		{"require", s.client, "", subject},
		{"require", nil, "client certificate rejected", ""},
		{"require", s.alien, "client certificate rejected", ""},
		{"verify_if_given", nil, "", ""},
		{"verify_if_given", s.client, "", subject},
		{"verify_if_given", s.alien, "client certificate rejected", ""},
	}
	for _, tc := range cases {
		name := tc.mode + "/none"
		if tc.cert != nil {
			name = tc.mode + "/" + tc.cert.Cert.Subject.CommonName
		}
		t.Run(name, func(t *testing.T) {
			cfg := &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile, ClientAuth: tc.mode}
			if tc.mode != "none" {
				cfg.CAFile = s.ca.CAFile
			}
			r, log := newRefusals(t)
			l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{TLS: cfg, Logger: log})
			got := acceptAsync(context.Background(), l)
			cl, err := s.dial(t, l.Addr(), tc.cert)
			if err == nil {
				// TLS 1.3 clients learn of a rejected certificate only
				// when they read; the write itself may succeed.
				_, err = cl.Write([]byte("hello over tls"))
			}
			if tc.reason != "" {
				if reason := r.next(); reason != tc.reason {
					t.Fatalf("refused for %q, want %q", reason, tc.reason)
				}
				if st := l.Stats(); st.CertRejected != 1 || st.Accepted != 0 {
					t.Fatalf("stats %+v, want one certificate rejected", st)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cl.Close()
			c := waitAccept(t, got, 10*time.Second)
			if want := "tls://" + cl.LocalAddr().String(); !strings.HasPrefix(c.Name(), want) {
				t.Errorf("Name %q does not start with %q", c.Name(), want)
			}
			if c.Identity() != tc.ident {
				t.Errorf("Identity %q, want %q", c.Identity(), tc.ident)
			}
			if tc.ident != "" && !strings.HasSuffix(c.Name(), " ["+tc.ident+"]") {
				t.Errorf("Name %q does not end with the identity", c.Name())
			}
			if !c.Encrypted() {
				t.Error("a TLS source is not Encrypted")
			}
			if _, err := c.Desc(); !errors.Is(err, srcs.ErrNoDescriptor) {
				t.Errorf("Desc: %v, want ErrNoDescriptor", err)
			}
			// A runner waits on SyscallConn for plaintext, not for a
			// readable socket: the wait returns once bytes can be Read,
			// and they come whole.
			rc, err := c.SyscallConn()
			if err != nil {
				t.Fatalf("SyscallConn: %v", err)
			}
			if err := rc.Read(func(uintptr) bool { t.Error("the wait called its callback"); return true }); err != nil {
				t.Fatalf("waiting for plaintext: %v", err)
			}
			data, err := io.ReadAll(c)
			if err != nil || string(data) != "hello over tls" {
				t.Fatalf("read %q, %v", data, err)
			}
			if st := l.Stats(); st.Accepted != 1 {
				t.Errorf("stats %+v, want one accepted", st)
			}
		})
	}
}

// TestTLSListenerHostilePeers sends what a TLS port must refuse: nothing
// at all (a handshake that never finishes), plaintext, and garbage. Each
// is closed with a counted reason, the listener holds nothing for them
// (goleak checks at exit), and a good client still gets in.
func TestTLSListenerHostilePeers(t *testing.T) {
	s := newTLSSetup(t)
	r, log := newRefusals(t)
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{
		TLS:              &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile},
		HandshakeTimeout: 200 * time.Millisecond,
		MaxConns:         4,
		Logger:           log,
	})
	got := acceptAsync(context.Background(), l)

	silent := dial(t, l.Addr())
	if reason := r.next(); reason != "handshake timed out" {
		t.Fatalf("silent peer refused for %q", reason)
	}
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Error("the silent peer's connection is still open")
	}
	for _, junk := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\x16\x03\x01\x00\x05garbage-not-a-hello"} {
		c := dial(t, l.Addr())
		if _, err := c.Write([]byte(junk)); err != nil {
			t.Fatal(err)
		}
		if reason := r.next(); reason != "TLS handshake failed" {
			t.Fatalf("%q refused for %q", junk, reason)
		}
	}
	// A flood of slow handshakes takes every slot under MaxConns for a
	// handshake timeout at most, then a good client gets in.
	for range 4 {
		dial(t, l.Addr())
	}
	for range 4 {
		if reason := r.next(); reason != "handshake timed out" {
			t.Fatalf("slow handshake refused for %q", reason)
		}
	}
	cl, err := s.dial(t, l.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.Write([]byte("ok"))
	cl.Close()
	c := waitAccept(t, got, 10*time.Second)
	if data, err := io.ReadAll(c); err != nil || string(data) != "ok" {
		t.Fatalf("read %q, %v", data, err)
	}
	want := srcs.ListenerStats{Accepted: 1, HandshakeTimeouts: 5, TLSFailures: 2}
	if st := l.Stats(); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
}

// TestTLSListenerCloseCutsHandshakes closes a listener while handshakes
// hang: Close returns at once, and no goroutine is left (goleak).
func TestTLSListenerCloseCutsHandshakes(t *testing.T) {
	s := newTLSSetup(t)
	l, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{
		TLS: &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := acceptAsync(context.Background(), l)
	for range 3 {
		dial(t, l.Addr())
	}
	start := time.Now()
	l.Close()
	if r := <-got; !errors.Is(r.err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", r.err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v: it waited for the handshake timeout", d)
	}
}

// TestTLSCertificateReload renews the certificate files under a running
// listener: new sessions get the new certificate, and a session opened
// before keeps going.
func TestTLSCertificateReload(t *testing.T) {
	s := newTLSSetup(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	s.server.CopyTo(t, certFile, keyFile)
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: certFile, KeyFile: keyFile}})

	// Handshakes begin with the first Accept.
	pending := acceptAsync(context.Background(), l)
	old, err := s.dial(t, l.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	oc := waitAccept(t, pending, 10*time.Second)
	if _, err := old.Write([]byte("before ")); err != nil {
		t.Fatal(err)
	}

	renewed := s.ca.Server(t, "server")
	renewed.CopyTo(t, certFile, keyFile)
	// The listener looks at the files at most once a second, at a
	// handshake: new sessions show the renewal within a few seconds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.dial(t, l.Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		serial := c.ConnectionState().PeerCertificates[0].SerialNumber
		c.Close()
		acceptOne(t, l).Close()
		if serial.Cmp(renewed.Cert.SerialNumber) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was never served")
		}
		time.Sleep(100 * time.Millisecond) // the reload is paced by the clock
	}
	if _, err := old.Write([]byte("and after")); err != nil {
		t.Fatal(err)
	}
	old.Close()
	if data, err := io.ReadAll(oc); err != nil || string(data) != "before and after" {
		t.Fatalf("the session from before the renewal read %q, %v", data, err)
	}

	// A broken renewal keeps the working pair in use.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past the reload's pacing
	c, err := s.dial(t, l.Addr(), nil)
	if err != nil {
		t.Fatalf("a broken renewal broke the listener: %v", err)
	}
	c.Close()
	acceptOne(t, l).Close()
}

// TestTrustConfigErrors checks that bad settings fail at ListenTCP and name
// the YAML keys.
func TestTrustConfigErrors(t *testing.T) {
	s := newTLSSetup(t)
	cases := []struct {
		name string
		cfg  srcs.ListenerConfig
		want string
	}{
		{"missing cert", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: "/nonexistent/c.pem", KeyFile: s.server.KeyFile}},
			"tls.cert_file: stat /nonexistent/c.pem: no such file or directory"},
		{"no key", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: s.server.CertFile}}, "cert_file and key_file are required"},
		{"bad client_auth", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile, ClientAuth: "always"}},
			`tls.client_auth: "always": must be none, require or verify_if_given`},
		{"require without CA", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile, ClientAuth: "require"}},
			"tls.ca_file: required with client_auth require"},
		{"bad CA", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile, ClientAuth: "require", CAFile: s.server.KeyFile}},
			"tls.ca_file: " + s.server.KeyFile + ": no PEM certificate in it"},
		{"key mismatch", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.client.KeyFile}},
			"tls.cert_file " + s.server.CertFile + ", tls.key_file " + s.client.KeyFile},
		{"bad version", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile, MinVersion: "1.1"}},
			`tls.min_version: "1.1": must be 1.2 or 1.3`},
		{"bad allow", srcs.ListenerConfig{Allow: []string{"10.0.0.0/8", "10.1.2.300/32"}}, `allow[1]: "10.1.2.300/32"`},
		{"no trusted proxies", srcs.ListenerConfig{ProxyProtocol: &srcs.ProxyProtocolConfig{}}, "proxy_protocol.trusted: no proxy address"},
		{"bad trusted", srcs.ListenerConfig{ProxyProtocol: &srcs.ProxyProtocolConfig{Trusted: []string{"proxy.local"}}}, `proxy_protocol.trusted[0]: "proxy.local"`},
		{"negative timeout", srcs.ListenerConfig{HandshakeTimeout: -time.Second}, "handshake_timeout: -1s is negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := srcs.ListenTCP("127.0.0.1:0", tc.cfg)
			if err == nil {
				l.Close()
				t.Fatal("ListenTCP succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	if _, err := srcs.ListenUnix(filepath.Join(t.TempDir(), "s"), srcs.ListenerConfig{Allow: []string{"10.0.0.0/8"}}); err == nil ||
		!strings.Contains(err.Error(), "allow: for TCP listeners only") {
		t.Fatalf("ListenUnix with allow: %v", err)
	}
}

// proxyHeader formats a PROXY header of the given version for a client at
// src talking to dst.
func proxyHeader(t *testing.T, version byte, src, dst string) []byte {
	t.Helper()
	sa, _ := net.ResolveTCPAddr("tcp", src)
	da, _ := net.ResolveTCPAddr("tcp", dst)
	b, err := proxyproto.HeaderProxyFromAddrs(version, sa, da).Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProxyProtocol plays a trusted proxy (127.0.0.2) and an untrusted
// peer (127.0.0.1) against a listener with the PROXY protocol, with and
// without TLS behind it.
func TestProxyProtocol(t *testing.T) {
	s := newTLSSetup(t)
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			r, log := newRefusals(t)
			cfg := srcs.ListenerConfig{
				ProxyProtocol:    &srcs.ProxyProtocolConfig{Trusted: []string{"127.0.0.2/32"}},
				Allow:            []string{"127.0.0.1", "203.0.113.0/24", "2001:db8::/32"},
				HandshakeTimeout: 300 * time.Millisecond,
				Logger:           log,
			}
			scheme := "tcp://"
			if withTLS {
				cfg.TLS = &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile}
				scheme = "tls://"
			}
			l := listen(t, "127.0.0.1:0", cfg)
			// send writes hdr then msg, over TLS if the listener has it.
			// It runs on its own goroutine: it reports with t.Error.
			send := func(c net.Conn, hdr []byte, msg string) {
				defer c.Close()
				if _, err := c.Write(hdr); err != nil {
					t.Error(err)
					return
				}
				if withTLS {
					c = tls.Client(c, &tls.Config{RootCAs: s.ca.Pool(), ServerName: "localhost"})
				}
				if _, err := c.Write([]byte(msg)); err != nil {
					t.Error(err)
				}
				c.Close()
			}
			check := func(c srcs.Source, wantName, wantData string) {
				t.Helper()
				if !strings.HasPrefix(c.Name(), wantName) {
					t.Errorf("Name %q, want %q", c.Name(), wantName)
				}
				var data []byte
				var err error
				if withTLS {
					data, err = io.ReadAll(c)
				} else {
					// No byte past the header was read in user space: the
					// descriptor holds the whole stream.
					data = srcstest.ReadDesc(t, c)
				}
				if err != nil || string(data) != wantData {
					t.Fatalf("read %q, %v; want %q", data, err, wantData)
				}
			}

			for _, v := range []byte{1, 2} {
				got := acceptAsync(context.Background(), l)
				pc := dialFrom(t, "127.0.0.2", l.Addr())
				go send(pc, proxyHeader(t, v, "203.0.113.7:5555", "198.51.100.1:443"), "via proxy v"+string('0'+v))
				check(waitAccept(t, got, 10*time.Second), scheme+"203.0.113.7:5555", "via proxy v"+string('0'+v))
			}
			got := acceptAsync(context.Background(), l)
			pc := dialFrom(t, "127.0.0.2", l.Addr())
			go send(pc, proxyHeader(t, 2, "[2001:db8::7]:6000", "[2001:db8::1]:443"), "v6")
			check(waitAccept(t, got, 10*time.Second), scheme+"[2001:db8::7]:6000", "v6")

			// A direct client of the allowed network, with no header.
			got = acceptAsync(context.Background(), l)
			dc := dialFrom(t, "127.0.0.1", l.Addr())
			go send(dc, nil, "direct")
			check(waitAccept(t, got, 10*time.Second), scheme+dc.LocalAddr().String(), "direct")

			// Refused: a forged header from an untrusted address, a
			// trusted proxy without a header, and one naming a client
			// outside allow.
			fc := dialFrom(t, "127.0.0.1", l.Addr())
			fc.Write(proxyHeader(t, 1, "203.0.113.9:1", "198.51.100.1:443"))
			if reason := r.next(); reason != "PROXY header refused" {
				t.Fatalf("forged header refused for %q", reason)
			}
			nc := dialFrom(t, "127.0.0.2", l.Addr())
			nc.Write([]byte("no header here, just data"))
			if reason := r.next(); reason != "PROXY header refused" {
				t.Fatalf("headerless proxy refused for %q", reason)
			}
			oc := dialFrom(t, "127.0.0.2", l.Addr())
			oc.Write(proxyHeader(t, 2, "192.0.2.1:1", "198.51.100.1:443"))
			if reason := r.next(); reason != "address not allowed" {
				t.Fatalf("client outside allow refused for %q", reason)
			}
			// And at accept, a peer neither allowed nor a proxy.
			dialFrom(t, "127.0.0.3", l.Addr())
			if reason := r.next(); reason != "address not allowed" {
				t.Fatalf("unknown peer refused for %q", reason)
			}
			want := srcs.ListenerStats{Accepted: 4, Denied: 2, ProxyRefused: 2}
			if st := l.Stats(); st != want {
				t.Fatalf("stats %+v, want %+v", st, want)
			}
		})
	}
}

// TestAllowListPlain checks the allow-list on a listener with no
// handshake: a refused peer is closed at accept and counted, and Accept
// goes on to the next connection.
func TestAllowListPlain(t *testing.T) {
	r, log := newRefusals(t)
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{Allow: []string{"127.0.0.2/32"}, Logger: log})
	got := acceptAsync(context.Background(), l)
	bad := dialFrom(t, "127.0.0.1", l.Addr())
	if reason := r.next(); reason != "address not allowed" {
		t.Fatalf("refused for %q", reason)
	}
	if _, err := bad.Read(make([]byte, 1)); err == nil {
		t.Error("the refused connection is still open")
	}
	good := dialFrom(t, "127.0.0.2", l.Addr())
	c := waitAccept(t, got, 10*time.Second)
	if c.Name() != "tcp://"+good.LocalAddr().String() {
		t.Errorf("accepted %s", c.Name())
	}
	if st := l.Stats(); st.Denied != 1 || st.Accepted != 1 {
		t.Fatalf("stats %+v", st)
	}
}
