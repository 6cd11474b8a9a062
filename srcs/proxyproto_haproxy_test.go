package srcs_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// freePort returns a loopback port free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startHAProxy runs Debian's haproxy in TCP mode with two frontends in
// front of backend: one sends PROXY v1 headers, the other v2. It returns
// their addresses.
func startHAProxy(t *testing.T, backend string) (v1, v2 string) {
	t.Helper()
	bin := srcstest.RequireHAProxy(t)
	v1, v2 = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	cfg := fmt.Sprintf(`global
	maxconn 64
defaults
	mode tcp
	timeout connect 5s
	timeout client 30s
	timeout server 30s
frontend v1
	bind %s
	default_backend v1
frontend v2
	bind %s
	default_backend v2
backend v1
	server sluice %s send-proxy
backend v2
	server sluice %s send-proxy-v2
`, v1, v2, backend, backend)
	file := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cmd := exec.Command(bin, "-db", "-f", file)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range []string{v1, v2} {
		for {
			// HAProxy passes this bare connect on to the backend, as a
			// source from 127.0.0.1 that the test skips.
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("haproxy never listened on %s: %v; output:\n%s", a, err, out.String())
			}
			time.Sleep(10 * time.Millisecond) // an external process: nothing to wait on
		}
	}
	return v1, v2
}

// TestProxyProtocolBehindHAProxy puts a real HAProxy in front of a
// listener that trusts it: clients connect from 127.0.0.5 to HAProxy on
// 127.0.0.1, and the sources are named for 127.0.0.5, with every byte the
// client sent on the descriptor, for v1 and v2 headers alike. A client
// that goes around HAProxy and forges a header is refused.
func TestProxyProtocolBehindHAProxy(t *testing.T) {
	r, log := newRefusals(t)
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{
		ProxyProtocol: &srcs.ProxyProtocolConfig{Trusted: []string{"127.0.0.1/32"}},
		Logger:        log,
	})
	v1, v2 := startHAProxy(t, l.Addr().String())
	for i, front := range []string{v1, v2} {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5)}}
		c, err := d.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte(fmt.Sprintf("line %d through haproxy\n", i+1)), 1000)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		// The startup probes (from 127.0.0.1) may have reached us too.
		var ac srcs.Source
		for ac == nil || strings.HasPrefix(ac.Name(), "tcp://127.0.0.1:") {
			ac = acceptOne(t, l)
		}
		if want := "tcp://" + c.LocalAddr().String(); ac.Name() != want {
			t.Errorf("v%d: Name %q, want %q", i+1, ac.Name(), want)
		}
		if data := srcstest.ReadDesc(t, ac); !bytes.Equal(data, msg) {
			t.Errorf("v%d: read %d bytes, want %d", i+1, len(data), len(msg))
		}
		c.Close()
	}
	forger := dialFrom(t, "127.0.0.5", l.Addr())
	forger.Write(proxyHeader(t, 2, "198.51.100.66:1", "127.0.0.1:1"))
	if reason := r.next(); reason != "PROXY header refused" {
		t.Fatalf("forged header refused for %q", reason)
	}
	if st := l.Stats(); st.Accepted < 2 || st.ProxyRefused != 1 {
		t.Fatalf("stats %+v", st)
	}
}
