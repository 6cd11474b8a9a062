package engine_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestAddSourceOpenErrors: what AddSource can know at once it returns. A
// source that cannot reconnect is opened before AddSource returns, and a
// file that does not exist is AddSource's error, with nothing registered
// and nothing for the error handler. A client that reconnects is
// accepted, and its refused dials go to the error handler.
func TestAddSourceOpenErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.log")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		name    string
		src     func() (srcs.Source, error)
		wantErr error // nil: AddSource succeeds
	}{
		{"tail of a missing file", func() (srcs.Source, error) {
			return srcs.NewTail(srcs.TailConfig{Path: missing})
		}, fs.ErrNotExist},
		{"missing file", func() (srcs.Source, error) {
			return srcs.NewFile(srcs.FileConfig{Path: missing})
		}, fs.ErrNotExist},
		{"client of a refused port", func() (srcs.Source, error) {
			return srcs.NewTCPClient(srcs.TCPClientConfig{Addr: refused, Backoff: srcs.Backoff{Initial: time.Millisecond, Attempts: 1}})
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			var reported atomic.Int64
			e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096},
				engine.WithErrorHandler(func(error) { reported.Add(1) }))
			if err != nil {
				t.Fatal(err)
			}
			src, err := tc.src()
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.AddSource(src)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("AddSource: %v", err)
				}
				// The refused dial ends the source (one attempt), in the
				// background, with its error ahead of its end.
				for c, err := range e.Chunks(context.Background()) {
					if err != nil {
						t.Fatal(err)
					}
					if c.Flags&srcs.EndOfStream != 0 {
						break
					}
				}
				if reported.Load() != 1 {
					t.Fatalf("%d errors reported, want the refused dial", reported.Load())
				}
			} else {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("AddSource: %v, want an error matching %v", err, tc.wantErr)
				}
				if n := len(e.Stats().Sources); n != 0 {
					t.Fatalf("%d sources registered after a failed AddSource", n)
				}
			}
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			for range e.Chunks(context.Background()) {
			}
			if tc.wantErr != nil && reported.Load() != 0 {
				t.Fatalf("the error handler heard of an error AddSource returned")
			}
		})
	}
}

// TestAddAfterShutdown: a source or listener added after Shutdown is
// refused with an error that says so and matches ErrClosed, and the id
// AddSource returns then, 0, is no source's: the first source's id is 1.
func TestAddAfterShutdown(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.log")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	file, _ := srcs.NewFile(srcs.FileConfig{Path: path})
	first, err := e.AddSource(file)
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 {
		t.Errorf("the first source's id is 0, the id AddSource returns with an error")
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for c := range e.Chunks(context.Background()) {
		_ = c // the file's chunks, queued before the shutdown
	}
	client, _ := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: "127.0.0.1:1"})
	again, _ := srcs.NewFile(srcs.FileConfig{Path: path})
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name string
		add  func() (srcs.ID, error)
	}{
		{"a file", func() (srcs.ID, error) { return e.AddSource(again) }},
		{"a reconnecting client", func() (srcs.ID, error) { return e.AddSource(client) }},
		{"a listener", func() (srcs.ID, error) { return 0, e.AddListener(ln) }},
	} {
		id, err := tc.add()
		switch {
		case !errors.Is(err, engine.ErrClosed) || !errors.Is(err, net.ErrClosed):
			t.Errorf("%s after Shutdown: %v, want ErrClosed", tc.name, err)
		case !strings.Contains(err.Error(), "after Shutdown"):
			t.Errorf("%s after Shutdown: %q does not say why", tc.name, err)
		case id != 0:
			t.Errorf("%s after Shutdown: id %d", tc.name, id)
		}
	}
}
