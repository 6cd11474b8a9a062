package engine_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/testca"
	"github.com/sluice-io/sluice/srcs"
)

// TestTLSListenerPath serves a TLS listener that requires client
// certificates on every runner: TLS sessions go to the goroutine runner
// whatever the engine's own runner, their chunks carry the client's
// verified subject in their source's name, and every byte arrives
// decrypted.
func TestTLSListenerPath(t *testing.T) {
	ca := testca.New(t, "engine-tls")
	srv, cli := ca.Server(t, "server"), ca.Client(t, "sensor-9", "Acme")
	for _, runner := range []string{"auto", "epoll", "goroutine"} {
		t.Run(runner, func(t *testing.T) {
			ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{TLS: &srcs.TLSConfig{
				CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CAFile, ClientAuth: "require",
			}})
			if err != nil {
				t.Fatal(err)
			}
			e, err := engine.New(engine.Config{Runner: runner, Buffers: 64, BufSize: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			if err := e.AddListener(ln); err != nil {
				t.Fatal(err)
			}
			msg := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
			go func() {
				c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{
					RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{cli.TLS},
				})
				if err != nil {
					t.Error(err)
					return
				}
				c.Write(msg)
				c.Close()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var got []byte
			sawRunner := ""
			for {
				c, err := e.Next(ctx)
				if err != nil {
					t.Fatalf("Next: %v after %d bytes", err, len(got))
				}
				if !strings.HasPrefix(c.Name, "tls://127.0.0.1:") || !strings.HasSuffix(c.Name, " [CN=sensor-9,O=Acme]") {
					t.Fatalf("chunk from %q", c.Name)
				}
				got = append(got, c.Data...)
				if sawRunner == "" {
					for _, s := range e.Stats().Sources {
						if s.ID == c.Source {
							sawRunner = s.Runner
						}
					}
				}
				eos := c.Flags&srcs.EndOfStream != 0
				c.Release()
				if eos {
					break
				}
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("got %d bytes, want %d", len(got), len(msg))
			}
			if sawRunner != "goroutine" {
				t.Fatalf("the TLS source ran on %q (engine runner %s), want goroutine", sawRunner, e.Runner())
			}
		})
	}
}
