package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/engine"
)

// Probe writes what this machine offers the node: the io_uring probe's
// report, the runner auto picks and why it skipped the others, and
// whether each runner can start here. It opens no source.
func Probe(w io.Writer) error {
	report, _ := engine.ProbeURing()
	fmt.Fprintln(w, report)
	rec := &recorder{}
	e, err := engine.New(engine.Config{Buffers: 8, BufSize: 4096}, engine.WithLogger(slog.New(rec)))
	if err != nil {
		return fmt.Errorf("node: probe: %w", err)
	}
	fmt.Fprintf(w, "\nauto picks: %s\n", e.Runner())
	closeEngine(e)
	for _, line := range rec.lines() {
		fmt.Fprintf(w, "  %s\n", line)
	}
	fmt.Fprintln(w, "\nrunners:")
	for _, name := range []string{engine.RunnerURing, engine.RunnerEpoll, engine.RunnerGoroutine, engine.RunnerThread} {
		e, err := engine.New(engine.Config{Runner: name, Buffers: 8, BufSize: 4096})
		switch {
		case err != nil:
			fmt.Fprintf(w, "  %-10s unavailable: %v\n", name, err)
		case e.Runner() != name:
			fmt.Fprintf(w, "  %-10s not tried: %s=%s overrides the choice\n", name, engine.EnvRunner, e.Runner())
		default:
			fmt.Fprintf(w, "  %-10s available\n", name)
		}
		if e != nil {
			closeEngine(e)
		}
	}
	return nil
}

func closeEngine(e *engine.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.Shutdown(ctx)
}

// recorder keeps the engine's runner decisions as lines. Safe for
// concurrent use.
type recorder struct {
	mu    sync.Mutex
	out   []string
	attrs []slog.Attr
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	if !strings.HasPrefix(rec.Message, "runner") {
		return nil
	}
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	r.out = append(r.out, b.String())
	r.mu.Unlock()
	return nil
}

func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.out...)
}
