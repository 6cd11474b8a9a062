package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/internal/testkit/testca"
	"github.com/sluice-io/sluice/srcs"
	mqttsrc "github.com/sluice-io/sluice/srcs/mqtt"
)

// startMosquittoTLS runs mosquitto with its plaintext listener and a TLS
// listener that requires a client certificate from ca, and returns the
// broker and the TLS listener's address.
func startMosquittoTLS(t *testing.T, ca *testca.CA) (*mosquitto.Broker, string) {
	t.Helper()
	bin := srcstest.RequireMosquitto(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(tlsAddr)
	srv := ca.Server(t, "mosquitto")
	// mosquitto may drop root to its own user: let it read the files.
	for _, f := range []string{ca.CAFile, srv.CertFile, srv.KeyFile} {
		os.Chmod(f, 0o644)
		for d := filepath.Dir(f); len(d) > len(os.TempDir()); d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
	}
	b, err := mosquitto.StartWith(bin, t.TempDir(),
		"listener "+port+" 127.0.0.1",
		"cafile "+ca.CAFile,
		"certfile "+srv.CertFile,
		"keyfile "+srv.KeyFile,
		"require_certificate true",
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	return b, tlsAddr
}

// TestMQTTMosquittoTLS subscribes over TLS, with a client certificate and
// a password from a file, to Debian's mosquitto, while a publisher
// publishes in plaintext; and checks that a client without a certificate
// is refused.
func TestMQTTMosquittoTLS(t *testing.T) {
	ca := testca.New(t, "mqtt-test")
	broker, tlsAddr := startMosquittoTLS(t, ca)
	client := ca.Client(t, "sluice-node", "Acme")
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const topic = "sluice/tls"
	cfg := mqttsrc.MQTTConfig{
		Broker: tlsAddr, ClientID: "sluice-tls", Topics: []string{topic}, QoS: 1, CleanSession: true,
		Username: "node", PasswordFile: pwFile, DialTimeout: 5 * time.Second,
		TLS: &srcs.TLSConfig{CAFile: ca.CAFile, CertFile: client.CertFile, KeyFile: client.KeyFile},
	}
	s := subscribe(t, cfg, driveOpts{})
	if !s.m.Encrypted() || !strings.HasPrefix(s.m.Name(), "mqtts://") {
		t.Fatalf("%s: Encrypted %v", s.m.Name(), s.m.Encrypted())
	}
	s.pump(10*time.Second, "the SUBACK over TLS", func() bool { return s.m.Stats().Subscribes >= 1 })
	if _, err := s.m.Desc(); !errors.Is(err, srcs.ErrNoDescriptor) {
		t.Errorf("Desc of a TLS session: %v, want ErrNoDescriptor", err)
	}
	pub := mosquitto.StartPublisher(broker.Addr, topic)
	t.Cleanup(pub.Halt)
	s.pump(10*time.Second, "100 messages over TLS", func() bool { return len(s.msgs) >= 100 })
	pub.Halt()
	for i, m := range s.msgs[:100] {
		if m.topic != topic || m.payload != fmt.Sprintf("%08d", i+1) && m.payload != fmt.Sprintf("%08d", i) {
			t.Fatalf("message %d: %q on %q", i, m.payload, m.topic)
		}
	}

	// No client certificate: the broker refuses the handshake.
	bare := cfg
	bare.TLS = &srcs.TLSConfig{CAFile: ca.CAFile}
	m, err := mqttsrc.NewMQTT(bare)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Open(ctx); err == nil {
		m.Close()
		t.Fatal("a client without a certificate connected")
	}
}
