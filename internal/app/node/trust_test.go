package node

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-io/sluice/internal/testkit/testca"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// webNode starts a node whose metrics endpoint reads a web configuration
// file with TLS from a test CA and one basic-auth user, and returns it
// with an HTTPS client that trusts the CA.
func webNode(t *testing.T, pprof bool) (*testNode, *http.Client) {
	t.Helper()
	ca := testca.New(t, "metrics")
	leaf := ca.Server(t, "localhost")
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	web := srcstest.WriteFile(t, dir, "web.yml", "tls_server_config:\n  cert_file: "+leaf.CertFile+"\n  key_file: "+leaf.KeyFile+
		"\nbasic_auth_users:\n  prometheus: "+string(hash)+"\n")
	tn := startNode(t, "sources:\n  - tcp: {listen: 127.0.0.1:0}\nmetrics:\n  web_config_file: "+web+
		"\n  pprof: "+map[bool]string{true: "true", false: "false"}[pprof]+"\n")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	t.Cleanup(client.CloseIdleConnections)
	return tn, client
}

func get(t *testing.T, c *http.Client, url, user, pass string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestNodeMetricsWebConfig: with metrics.web_config_file, the endpoint
// speaks TLS only and asks for a password on every path; pprof stays off
// unless asked for, and behind the same password when it is.
func TestNodeMetricsWebConfig(t *testing.T) {
	tn, client := webNode(t, false)
	base := "https://" + tn.n.MetricsAddr()
	if !strings.Contains(tn.log.String(), "metrics=https://") {
		t.Errorf("node ready does not give the https address:\n%s", tn.log)
	}
	for _, tc := range []struct {
		path, user, pass string
		code             int
		body             string
	}{
		{"/metrics", "", "", http.StatusUnauthorized, ""},
		{"/metrics", "prometheus", "wrong", http.StatusUnauthorized, ""},
		{"/metrics", "someone", "s3cret", http.StatusUnauthorized, ""},
		{"/healthz", "", "", http.StatusUnauthorized, ""},
		{"/metrics", "prometheus", "s3cret", http.StatusOK, "sluice_bytes_received_total"},
		{"/healthz", "prometheus", "s3cret", http.StatusOK, `"status": "ok"`},
		{"/debug/pprof/", "prometheus", "s3cret", http.StatusNotFound, ""},
	} {
		code, body := get(t, client, base+tc.path, tc.user, tc.pass)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s as %q/%q: %d, want %d with %q:\n%.300s", tc.path, tc.user, tc.pass, code, tc.code, tc.body, body)
		}
	}
	// Plaintext to the TLS port: crypto/tls answers a bare 400, never the
	// metrics.
	resp, err := http.Get("http://" + tn.n.MetricsAddr() + "/metrics")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "sluice_") {
			t.Errorf("a plaintext scrape got %d:\n%.300s", resp.StatusCode, body)
		}
	}
	// A client that does not trust the CA fails its handshake.
	if _, err := http.Get(base + "/metrics"); err == nil {
		t.Error("a client without the CA scraped the endpoint")
	}
}

// TestNodeMetricsWebConfigPprof: metrics.pprof serves /debug/pprof/ behind
// the web configuration's password.
func TestNodeMetricsWebConfigPprof(t *testing.T) {
	tn, client := webNode(t, true)
	base := "https://" + tn.n.MetricsAddr()
	if code, _ := get(t, client, base+"/debug/pprof/", "", ""); code != http.StatusUnauthorized {
		t.Errorf("pprof without a password: %d", code)
	}
	if code, body := get(t, client, base+"/debug/pprof/", "prometheus", "s3cret"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof with the password: %d\n%.300s", code, body)
	}
	if strings.Contains(tn.log.String(), "without a password") {
		t.Errorf("warned of pprof without a password although it has one:\n%s", tn.log)
	}
}

// TestNodeMetricsWebConfigErrors: a web configuration file the toolkit
// would refuse fails the node at start-up, naming the key, and sluice
// check's preflight says the same.
func TestNodeMetricsWebConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, web, want string
	}{
		{"missing", "", "no such file"},
		{"unknown key", "tls_server_config:\n  cert_fiel: x\n", "cert_fiel"},
		{"not bcrypt", "basic_auth_users:\n  prometheus: plaintext\n", "basic_auth_users: prometheus: not a bcrypt hash"},
		{"missing cert", "tls_server_config:\n  cert_file: " + dir + "/nope.pem\n  key_file: " + dir + "/nope-key.pem\n", "nope.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := dir + "/missing.yml"
			if tc.web != "" {
				path = srcstest.WriteFile(t, dir, strings.ReplaceAll(tc.name, " ", "-")+".yml", tc.web)
			}
			body := "sources:\n  - tcp: {listen: 127.0.0.1:0}\nmetrics:\n  web_config_file: " + path + "\n"
			_, err := newTestNode(t, body)
			if err == nil || !strings.Contains(err.Error(), "metrics.web_config_file") {
				t.Fatalf("got %v, want an error naming metrics.web_config_file", err)
			}
			cfg, lerr := Parse("node.yaml", []byte(body))
			if lerr != nil {
				t.Fatal(lerr)
			}
			notes := strings.Join(Preflight(cfg), "\n")
			if !strings.Contains(notes, "metrics.web_config_file") {
				t.Errorf("preflight: %q", notes)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestNodeListenerRefusals: a listener's refusals show in /metrics by
// reason, labelled with the listen address as the node file writes it,
// beside its accepted, open and failed connections.
func TestNodeListenerRefusals(t *testing.T) {
	tn := startNode(t, "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      allow: [127.0.0.2/32]\n")
	addr := tn.addr("tcp")
	const denied = `sluice_listener_refused_total{listener="127.0.0.1:0",reason="denied"}`
	if v := scrapeValue(t, tn.metricsURL(), denied); v != 0 {
		t.Fatalf("%s %v before any connection", denied, v)
	}
	// From 127.0.0.1, not in allow: closed at accept.
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("refused"))
		c.Close()
	}
	until(t, "denied connections counted", func() bool { return scrapeValue(t, tn.metricsURL(), denied) == 2 })
	// From 127.0.0.2: accepted. One stays open, one is reset by its peer.
	from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	open, err := from.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	reset, err := from.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	const label = `{listener="127.0.0.1:0"}`
	until(t, "two open connections", func() bool {
		return scrapeValue(t, tn.metricsURL(), "sluice_listener_connections"+label) == 2
	})
	reset.(*net.TCPConn).SetLinger(0)
	reset.Close()
	until(t, "a failed connection counted", func() bool {
		return scrapeValue(t, tn.metricsURL(), "sluice_listener_connections_failed_total"+label) == 1
	})
	for sample, want := range map[string]float64{
		"sluice_listener_accepted_total" + label:                                           2,
		"sluice_listener_connections" + label:                                              1,
		`sluice_listener_refused_total{listener="127.0.0.1:0",reason="tls_failed"}`:        0,
		`sluice_listener_refused_total{listener="127.0.0.1:0",reason="handshake_timeout"}`: 0,
	} {
		if v := scrapeValue(t, tn.metricsURL(), sample); v != want {
			t.Errorf("%s %v, want %v", sample, v, want)
		}
	}
	if _, err := tn.stop(); err != nil {
		t.Fatalf("a listener's failed connection failed the node: %v", err)
	}
}

// TestNodeLateForgedProxyHeader: on a listener that trusts one proxy, a
// client from elsewhere that stays silent past handshake_timeout and only
// then sends a PROXY header is refused and counted, and neither its
// header nor what follows reaches the output.
func TestNodeLateForgedProxyHeader(t *testing.T) {
	tn := startNode(t, "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      handshake_timeout: 100ms\n"+
		"      proxy_protocol: {trusted: [127.0.0.2/32]}\noutput:\n  stdout: {}\n")
	addr := tn.addr("tcp")
	const label = `{listener="127.0.0.1:0"}`
	const refused = `sluice_listener_refused_total{listener="127.0.0.1:0",reason="proxy_refused"}`
	for _, v := range []byte{1, 2} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// The silent client is a source before its first byte.
		until(t, "the silent client accepted", func() bool {
			return scrapeValue(t, tn.metricsURL(), "sluice_listener_connections"+label) == 1
		})
		hdr := &proxyproto.Header{Version: v, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
			SourceAddr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 1}, DestinationAddr: &net.TCPAddr{IP: net.IPv4(198, 51, 100, 1), Port: 443}}
		b, err := hdr.Format()
		if err != nil {
			t.Fatal(err)
		}
		c.Write(append(b, "forged line\n"...))
		c.Close()
		until(t, "the late header refused", func() bool { return scrapeValue(t, tn.metricsURL(), refused) == float64(v) })
		until(t, "the connection gone", func() bool {
			return scrapeValue(t, tn.metricsURL(), "sluice_listener_connections"+label) == 0
		})
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("plain line\n"))
	c.Close()
	until(t, "a direct client's line", func() bool { return strings.Contains(tn.stdout.String(), "plain line\n") })
	if _, err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	if out := tn.stdout.String(); out != "plain line\n" {
		t.Fatalf("output %q: a forged header went through as data", out)
	}
}
