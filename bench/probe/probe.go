package probe

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/engine"
)

// ProbeReport says what the kernel offers and which runner auto picks.
type ProbeReport struct {
	IOURing   string          `json:"io_uring"` // engine.ProbeURing's report
	Auto      string          `json:"auto"`     // the runner auto chose
	Decisions []LogRecord     `json:"decisions"`
	Runners   []bench.Skipped `json:"runners"` // every runner; Reason empty when available
}

// LogRecord is one captured engine log record.
type LogRecord struct {
	Message string            `json:"message"`
	Attrs   map[string]string `json:"attrs"`
}

// captureHandler is a slog.Handler that keeps the records it is given.
// Safe for concurrent use.
type captureHandler struct {
	mu      *sync.Mutex
	records *[]LogRecord
	attrs   []slog.Attr
}

func newCaptureHandler() *captureHandler {
	return &captureHandler{mu: new(sync.Mutex), records: new([]LogRecord)}
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.records = append(*h.records, rec)
	h.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{mu: h.mu, records: h.records, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

func (h *captureHandler) list() []LogRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LogRecord(nil), *h.records...)
}

// ProbeConfig configures the `probe` command.
type ProbeConfig struct {
	JSON string // also write the report as JSON to this file ("-": stdout)
}

// RegisterFlags defines c's flags on fs.
func (c *ProbeConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.JSON, "json", c.JSON, "also write the JSON report to `FILE` (- for stdout)")
}

// Probe runs the `probe` command: it prints the io_uring probe, then
// starts an engine with runner auto, reports the runner decisions it
// logged, and shuts it down; then it tries every runner explicitly.
func Probe(c ProbeConfig, ios harness.IO) (*ProbeReport, error) {
	report, _ := engine.ProbeURing()
	rep := &ProbeReport{IOURing: report}
	h := newCaptureHandler()
	e, err := engine.New(engine.Config{Buffers: 8, BufSize: 4096}, engine.WithLogger(slog.New(h)))
	if err != nil {
		return nil, fmt.Errorf("bench: probe: %w", err)
	}
	rep.Auto = e.Runner()
	if err := bench.ShutdownEngine(e); err != nil {
		return nil, err
	}
	for _, r := range h.list() {
		if strings.HasPrefix(r.Message, "runner") {
			rep.Decisions = append(rep.Decisions, r)
		}
	}
	_, skipped := bench.AvailableRunners(harness.AllRunners())
	for _, name := range harness.AllRunners() {
		s := bench.Skipped{Runner: name}
		for _, k := range skipped {
			if k.Runner == name {
				s = k
			}
		}
		rep.Runners = append(rep.Runners, s)
	}

	fmt.Fprintln(ios.Out, rep.IOURing)
	fmt.Fprintf(ios.Out, "\nauto picks: %s\n", rep.Auto)
	for _, d := range rep.Decisions {
		fmt.Fprintf(ios.Out, "  %s: %s", d.Message, d.Attrs["runner"])
		for _, k := range []string{"reason", "var", "config"} {
			if v, ok := d.Attrs[k]; ok {
				fmt.Fprintf(ios.Out, " (%s: %s)", k, v)
			}
		}
		fmt.Fprintln(ios.Out)
	}
	fmt.Fprintln(ios.Out, "\nrunners:")
	for _, r := range rep.Runners {
		if r.Reason == "" {
			fmt.Fprintf(ios.Out, "  %-10s available\n", r.Runner)
		} else {
			fmt.Fprintf(ios.Out, "  %-10s unavailable: %s\n", r.Runner, r.Reason)
		}
	}
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	return rep, nil
}
