// Package enginetest starts engines for tests: an engine with a TCP
// listener on a free loopback port, shut down when the test ends. Only
// tests import it.
package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// Listen makes an engine of cfg and opts, adds a TCP listener on a free
// loopback port configured by lc, with srcOpts for each connection, and
// returns the engine and the listener's address. The engine is shut down
// when the test ends, unless the test shut it down itself (Shutdown is
// idempotent); a shutdown that fails then fails the test.
func Listen(t testing.TB, cfg engine.Config, lc srcs.ListenerConfig, opts []engine.Option, srcOpts ...engine.SourceOption) (*engine.Engine, string) {
	t.Helper()
	e, err := engine.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("enginetest: shutdown: %v", err)
		}
	})
	ln, err := srcs.ListenTCP("127.0.0.1:0", lc)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddListener(ln, srcOpts...); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	return e, ln.Addr().String()
}
