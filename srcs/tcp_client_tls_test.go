package srcs_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/srcs"
)

// TestTCPClientTLS dials a TLS server that requires a client certificate:
// with the right CA and certificate the stream arrives, decrypted, through
// Read; a server from another CA is refused at Open.
func TestTCPClientTLS(t *testing.T) {
	s := newTLSSetup(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{s.server.TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    s.ca.Pool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			served <- err.Error()
			return
		}
		tc.Write([]byte("from a tls server"))
		served <- tc.ConnectionState().PeerCertificates[0].Subject.String()
	}()

	cl, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: ln.Addr().String(), TLS: &srcs.TLSConfig{
		CAFile: s.ca.CAFile, CertFile: s.client.CertFile, KeyFile: s.client.KeyFile,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !cl.Encrypted() || cl.Name() != "tls://"+ln.Addr().String() {
		t.Fatalf("%s: Encrypted %v", cl.Name(), cl.Encrypted())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Desc(); !errors.Is(err, srcs.ErrNoDescriptor) {
		t.Errorf("Desc: %v, want ErrNoDescriptor", err)
	}
	data, err := io.ReadAll(readerFunc(cl.Read))
	if err != nil || string(data) != "from a tls server" {
		t.Fatalf("read %q, %v", data, err)
	}
	if who := <-served; who != "CN=sensor-7,O=Acme" {
		t.Fatalf("the server saw %q", who)
	}
	cl.Close()

	// The server's certificate is from a CA the client does not trust.
	other, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: ln.Addr().String(), TLS: &srcs.TLSConfig{CAFile: s.other.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	err = other.Open(ctx)
	var cv *tls.CertificateVerificationError
	if !errors.As(err, &cv) {
		other.Close()
		t.Fatalf("Open against an untrusted server: %v, want a certificate verification error", err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestSecretRedacted checks that a secret never prints, in any of the ways
// a configuration is printed, and loads from a file or the environment.
func TestSecretRedacted(t *testing.T) {
	cfg := struct {
		Broker   string      `yaml:"broker" json:"broker"`
		Username string      `yaml:"username" json:"username"`
		Password srcs.Secret `yaml:"password" json:"password"`
	}{Broker: "localhost:8883", Username: "node", Password: "hunter2"}
	for _, out := range []string{
		fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprintf("%s", cfg.Password),
		string(must(yaml.Marshal(cfg))), string(must(json.Marshal(cfg))),
	} {
		if strings.Contains(out, "hunter2") {
			t.Errorf("the password shows in %s", out)
		}
		if !strings.Contains(out, srcs.Redacted) {
			t.Errorf("no %s in %s", srcs.Redacted, out)
		}
	}
	file := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	t.Setenv("SLUICE_TEST_PW", "from-env")
	for _, tc := range []struct {
		inline     srcs.Secret
		file, env  string
		want, fail string
	}{
		{inline: "inline", want: "inline"},
		{file: file, want: "from-file"},
		{env: "SLUICE_TEST_PW", want: "from-env"},
		{file: "/nonexistent/pw", fail: "password_file: open /nonexistent/pw: no such file or directory"},
		{env: "SLUICE_TEST_UNSET", fail: "password_env: $SLUICE_TEST_UNSET is not set or empty"},
		{inline: "x", file: file, fail: "password, password_file and password_env: set at most one"},
	} {
		got, err := srcs.LoadSecret("password", tc.inline, tc.file, tc.env)
		switch {
		case tc.fail != "" && (err == nil || err.Error() != tc.fail):
			t.Errorf("%+v: error %v, want %q", tc, err, tc.fail)
		case tc.fail == "" && (err != nil || got.Reveal() != tc.want):
			t.Errorf("%+v: %q, %v; want %q", tc, got.Reveal(), err, tc.want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
