package srcs_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testkit/testca"
	"github.com/sluice-io/sluice/srcs"
)

// copyFile writes src's content over dst, as an operator replacing a file
// would.
func copyFile(t *testing.T, dst string, srcs ...string) {
	t.Helper()
	var b []byte
	for _, s := range srcs {
		c, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, c...)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLSClientCAReload replaces a listener's ca_file under open sessions:
// from the next handshakes on, clients of the new CA get in and clients of
// the old one are refused, while a session verified by the old CA keeps
// going; a broken file keeps the CAs in force, and a bundle of both admits
// both.
func TestTLSClientCAReload(t *testing.T) {
	s := newTLSSetup(t)
	caFile := filepath.Join(t.TempDir(), "clients-ca.pem")
	copyFile(t, caFile, s.ca.CAFile)
	r, log := newRefusals(t)
	l, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{Logger: log, TLS: &srcs.TLSConfig{
		CertFile: s.server.CertFile, KeyFile: s.server.KeyFile, CAFile: caFile, ClientAuth: "require",
	}})
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan srcs.Source, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.AcceptSource(ctx)
			if err != nil {
				return
			}
			accepted <- c
		}
	})
	defer func() {
		cancel()
		l.Close()
		wg.Wait()
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	}()

	// try opens a session with cert and says whether the listener let it
	// in; a refusal must be for the certificate.
	try := func(cert *testca.Leaf) srcs.Source {
		t.Helper()
		c, err := s.dial(t, l.Addr(), cert)
		if err == nil {
			// TLS 1.3 clients learn of a rejected certificate only when
			// they read.
			c.Write([]byte("x"))
		}
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ac := <-accepted:
				return ac
			case rec := <-r.log:
				if !strings.HasPrefix(rec.Message, "srcs: connection refused") {
					continue
				}
				if reason := attr(rec, "reason").String(); reason != "client certificate rejected" {
					t.Fatalf("refused for %q", reason)
				}
				return nil
			case <-timeout:
				t.Fatal("neither accepted nor refused within 10s")
			}
		}
	}
	// until tries cert until the listener lets it in: the listener looks
	// at the file at most once a second, at a handshake.
	until := func(cert *testca.Leaf, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if c := try(cert); c != nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never let in", what)
			}
			time.Sleep(100 * time.Millisecond) // the reload is paced by the clock
		}
	}

	old, err := s.dial(t, l.Addr(), s.client)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Write([]byte("before ")); err != nil {
		t.Fatal(err)
	}
	var oc srcs.Source
	select {
	case oc = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the first session was not accepted")
	}
	defer oc.Close()
	if c := try(s.alien); c != nil {
		t.Fatal("a client of another CA got in before the CA file changed")
	}

	// The stranger's CA replaces ours.
	copyFile(t, caFile, s.other.CAFile)
	until(s.alien, "a client of the new CA")
	if c := try(s.client); c != nil {
		c.Close()
		t.Fatal("a client of the CA taken out of the file still got in")
	}
	// The session verified by the old CA is untouched.
	if _, err := old.Write([]byte("and after")); err != nil {
		t.Fatal(err)
	}
	old.Close()
	if data, err := io.ReadAll(oc); err != nil || string(data) != "before and after" {
		t.Fatalf("the session from before the change read %q, %v", data, err)
	}

	// A broken file keeps the CAs in force.
	if err := os.WriteFile(caFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past the reload's pacing
	if c := try(s.alien); c == nil {
		t.Fatal("a broken CA file broke the listener")
	} else {
		c.Close()
	}
	if c := try(s.client); c != nil {
		c.Close()
		t.Fatal("a broken CA file let the old CA's client in")
	}

	// A bundle of both admits both.
	copyFile(t, caFile, s.ca.CAFile, s.other.CAFile)
	until(s.client, "a client of the first CA, in a bundle of both")
	if c := try(s.alien); c == nil {
		t.Fatal("a client of the second CA in the bundle was refused")
	} else {
		c.Close()
	}
}
