package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// endingSource reads data, then fails every Read with end; Close returns
// closeErr.
type endingSource struct {
	r        *bytes.Reader
	end      error
	closeErr error
}

func (s *endingSource) Name() string               { return "ending" }
func (s *endingSource) Open(context.Context) error { return nil }
func (s *endingSource) Close() error               { return s.closeErr }
func (s *endingSource) Read(p []byte) (int, error) {
	if s.r.Len() == 0 {
		return 0, s.end
	}
	return s.r.Read(p)
}

// TestCleanEndIsNotAnError: a clean end of stream reaches no error
// handler and no error count; the end-of-stream chunk reports it. Real
// errors are reported and counted by kind, and an error that happens to
// wrap io.EOF is not taken for a clean end.
func TestCleanEndIsNotAnError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		end       error
		closeErr  error
		wantKind  int // -1: no error
		wantState engine.State
	}{
		{"clean end", io.EOF, nil, -1, engine.Closed},
		{"reset", fmt.Errorf("read: %w", srcs.ErrReset), nil, engine.ErrorReset, engine.Failed},
		{"clean end, close fails", io.EOF, fmt.Errorf("keepalive expired: %w", io.ErrUnexpectedEOF), engine.ErrorOther, engine.Closed},
		{"clean end, close error wraps io.EOF", io.EOF, fmt.Errorf("broker went away: %w", io.EOF), engine.ErrorOther, engine.Closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			var mu sync.Mutex
			var errs []error
			e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096},
				engine.WithErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			if _, err := e.AddSource(&endingSource{r: bytes.NewReader(make([]byte, 10000)), end: tc.end, closeErr: tc.closeErr}); err != nil {
				t.Fatal(err)
			}
			var final *engine.SourceStats
			for c, err := range e.Chunks(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				if c.Flags&srcs.EndOfStream != 0 {
					final = c.Final
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			tot := e.Totals()
			if tc.wantKind < 0 {
				if len(errs) != 0 || tot.Errors != ([engine.NumErrorKinds]uint64{}) {
					t.Fatalf("a clean end was reported: handler got %v, totals %v", errs, tot.Errors)
				}
			} else {
				var se *srcs.SourceError
				if len(errs) != 1 || !errors.As(errs[0], &se) || !errors.Is(errs[0], tc.end) && !errors.Is(errs[0], tc.closeErr) {
					t.Fatalf("handler got %v, want one *srcs.SourceError", errs)
				}
				var want [engine.NumErrorKinds]uint64
				want[tc.wantKind] = 1
				if tot.Errors != want {
					t.Fatalf("error totals %v, want %v (kinds %v)", tot.Errors, want, engine.ErrorKinds)
				}
			}
			if final == nil || final.State != tc.wantState {
				t.Fatalf("end-of-stream chunk's Final %+v, want state %v", final, tc.wantState)
			}
			if final.Bytes != 10000 {
				t.Fatalf("Final.Bytes = %d, want 10000", final.Bytes)
			}
		})
	}
}
