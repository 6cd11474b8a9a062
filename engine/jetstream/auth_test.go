package jetstream_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/internal/testkit/testca"
	"github.com/sluice-io/sluice/srcs"
)

// startSecureServer runs an embedded nats-server that requires TLS (and a
// client certificate from ca when mutual is set) and the credentials auth
// sets on its options.
func startSecureServer(t *testing.T, ca *testca.CA, mutual bool, auth func(*server.Options)) *server.Server {
	t.Helper()
	srv := ca.Server(t, "nats")
	tc := &tls.Config{Certificates: []tls.Certificate{srv.TLS}, MinVersion: tls.VersionTLS12}
	if mutual {
		tc.ClientAuth, tc.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool()
	}
	o := &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, TLSConfig: tc, TLSTimeout: 5, TLSVerify: mutual,
	}
	auth(o)
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// TestCredentialsAndTLS connects the publisher to servers that require TLS
// and each kind of credential, from files and the environment, and checks
// that a wrong secret is refused without showing up in the error.
func TestCredentialsAndTLS(t *testing.T) {
	ca := testca.New(t, "nats-test")
	client := ca.Client(t, "sluice-node", "Acme")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := write("user.nk", string(seed)+"\n")
	t.Setenv("SLUICE_TEST_NATS_TOKEN", "t0ken-from-env")

	cases := []struct {
		name   string
		mutual bool
		auth   func(*server.Options)
		cfg    func(*jetstream.Config)
		wrong  func(*jetstream.Config) // a config the server must refuse
		secret string                  // must not appear in the refusal
	}{
		{
			name: "user and password_file", mutual: true,
			auth: func(o *server.Options) { o.Username, o.Password = "node", "pa55word" },
			cfg: func(c *jetstream.Config) {
				c.User, c.PasswordFile = "node", write("pw", "pa55word\n")
				c.TLS.CertFile, c.TLS.KeyFile = client.CertFile, client.KeyFile
			},
			wrong: func(c *jetstream.Config) {
				c.User, c.Password = "node", "not-the-pa55word"
				c.TLS.CertFile, c.TLS.KeyFile = client.CertFile, client.KeyFile
			},
			secret: "not-the-pa55word",
		},
		{
			name: "token_env",
			auth: func(o *server.Options) { o.Authorization = "t0ken-from-env" },
			cfg:  func(c *jetstream.Config) { c.TokenEnv = "SLUICE_TEST_NATS_TOKEN" },
			wrong: func(c *jetstream.Config) {
				c.TokenFile = write("badtoken", "wr0ng-t0ken")
			},
			secret: "wr0ng-t0ken",
		},
		{
			name: "nkey_seed_file",
			auth: func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} },
			cfg:  func(c *jetstream.Config) { c.NKeySeedFile = seedFile },
			wrong: func(c *jetstream.Config) {
				other, _ := nkeys.CreateUser()
				s, _ := other.Seed()
				c.NKeySeedFile = write("other.nk", string(s))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := startSecureServer(t, ca, tc.mutual, tc.auth)
			base := func() jetstream.Config {
				return jetstream.Config{
					URL: ns.ClientURL(), Subject: "secure." + strings.ReplaceAll(tc.name, " ", "_"), Stream: "SECURE",
					TLS: &srcs.TLSConfig{CAFile: ca.CAFile},
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cfg := base()
			tc.cfg(&cfg)
			p, err := jetstream.New(ctx, cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			p.Close(ctx)

			bad := base()
			tc.wrong(&bad)
			p, err = jetstream.New(ctx, bad)
			if err == nil {
				p.Close(ctx)
				t.Fatal("the server took a wrong credential")
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("the refusal shows the secret: %v", err)
			}
			// Without TLS the server refuses too.
			plain := base()
			tc.cfg(&plain)
			plain.TLS = nil
			if p, err := jetstream.New(ctx, plain); err == nil {
				p.Close(ctx)
				t.Fatal("connected without TLS")
			}
		})
	}
}

// TestCredentialsConfigErrors checks that credentials fail at New, naming
// the keys, before any connection.
func TestCredentialsConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  jetstream.Config
		want string
	}{
		{jetstream.Config{Subject: "s", PasswordFile: "/nonexistent/pw", User: "u"}, "password_file: open /nonexistent/pw: no such file or directory"},
		{jetstream.Config{Subject: "s", Password: "p"}, "password: set without user"},
		{jetstream.Config{Subject: "s", Token: "t", User: "u", Password: "p"}, "set one at most"},
		{jetstream.Config{Subject: "s", NKeySeedFile: "/nonexistent/nk"}, "nkey_seed_file:"},
		{jetstream.Config{Subject: "s", CredsFile: "/nonexistent/creds"}, "creds_file: stat /nonexistent/creds"},
		{jetstream.Config{Subject: "s", TLS: &srcs.TLSConfig{CAFile: "/nonexistent/ca.pem"}}, "tls.ca_file: open /nonexistent/ca.pem"},
		{jetstream.Config{Subject: "s", URL: "nats://u:hunter2@127.0.0.1:1", User: "u", Password: "p", TLS: &srcs.TLSConfig{ClientAuth: "require"}}, "tls.client_auth"},
	} {
		p, err := jetstream.New(context.Background(), tc.cfg)
		if err == nil {
			p.Close(context.Background())
			t.Errorf("%+v: New succeeded", tc.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not say %q", err, tc.want)
		}
	}
	// A URL's password stays out of a connection error.
	_, err := jetstream.New(context.Background(), jetstream.Config{Subject: "s", URL: "nats://u:hunter2@127.0.0.1:1"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("connection error %v shows the URL's password", err)
	}
}
