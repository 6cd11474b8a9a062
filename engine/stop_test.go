package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// waitingSource is a source whose Open fails at once (after the first,
// if openBlocks, which blocks until ctx ends), and which reconnects with
// a backoff long enough that only a stop can end the wait.
type waitingSource struct {
	openBlocks bool
	opens      chan struct{} // receives once per Open
}

func (s *waitingSource) Name() string { return "waiting" }
func (s *waitingSource) Open(ctx context.Context) error {
	s.opens <- struct{}{}
	if s.openBlocks {
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("refused")
}
func (s *waitingSource) Read([]byte) (int, error) { return 0, errors.New("not open") }
func (s *waitingSource) Close() error             { return nil }
func (s *waitingSource) Reconnect() srcs.Backoff {
	return srcs.Backoff{Initial: time.Hour, Max: time.Hour}
}

// TestStopEndsOpenAndBackoff: stopping a source interrupts an Open that
// blocks and a backoff wait, so the source ends at once rather than when
// the dial or the hour-long delay would have.
func TestStopEndsOpenAndBackoff(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	for _, tc := range []struct {
		name       string
		openBlocks bool
	}{
		{"blocked in Open", true},
		{"waiting to reconnect", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 4},
				engine.WithErrorHandler(func(error) {}))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			src := &waitingSource{openBlocks: tc.openBlocks, opens: make(chan struct{}, 4)}
			id, err := e.AddSource(src)
			if err != nil {
				t.Fatal(err)
			}
			<-src.opens
			if !tc.openBlocks {
				// The failed Open is followed by the backoff wait.
				waitSource(t, e, "waiting", func(s engine.SourceStats) bool { return s.State == engine.BackingOff })
			}
			if err := e.StopSource(id); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for {
				c, err := e.Next(ctx)
				if err != nil {
					t.Fatalf("the stopped source did not end: %v", err)
				}
				c.Release()
				if c.Source == id && c.Flags&srcs.EndOfStream != 0 {
					return
				}
			}
		})
	}
}
