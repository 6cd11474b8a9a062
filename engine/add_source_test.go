package engine_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"path/filepath"
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
