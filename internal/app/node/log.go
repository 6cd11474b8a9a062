package node

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-io/sluice/engine"
)

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(strings.ToUpper(s)))
	return l, err
}

// NewLogger builds the logger a node with the log section c writes to w:
// text (key=value) or JSON lines, at c's level, with durations written as
// the node file writes them ("5ms", not nanoseconds) and the credentials
// of URLs redacted. `sluice run` logs through it from the moment the node
// file is parsed, so that every line on standard error, a start-up
// failure included, has the format the file asks for.
func NewLogger(c Log, w io.Writer) (*slog.Logger, error) { return newLogger(c, w) }

// replaceAttr is the node's log handlers' ReplaceAttr.
func replaceAttr(groups []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
		return a
	}
	return redactAttr(groups, a)
}

// newLogger builds the node's logger from the node file's log section.
func newLogger(c Log, w io.Writer) (*slog.Logger, error) {
	lvl, err := parseLevel(c.Level)
	if c.Level == "" {
		lvl, err = slog.LevelInfo, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node: log.level: %q: must be debug, info, warn or error", c.Level)
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: replaceAttr}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// statusLoop logs a status line every Log.Status until the drain starts.
func (n *Node) statusLoop() {
	tick := time.NewTicker(n.cfg.Log.Status)
	defer tick.Stop()
	last, lastAt := n.e.Totals(), time.Now()
	lastRecs := n.records.Load()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-tick.C:
			t := n.e.Totals()
			recs := n.records.Load()
			secs := now.Sub(lastAt).Seconds()
			var errs uint64
			for k, v := range t.Errors {
				if k != engine.ErrorEOF {
					errs += v
				}
			}
			states := map[string]int{}
			for _, s := range n.Health().Sources {
				states[s.State]++
			}
			conns := n.e.CountSources()[engine.Running]
			n.log.Info("status",
				"bytes", t.Bytes, "bytes_per_s", int64(float64(t.Bytes-last.Bytes)/secs),
				"records", recs, "records_per_s", int64(float64(recs-lastRecs)/secs),
				"chunks", t.Delivered, "live_sources", conns,
				"running", states[stateRunning], "waiting", states[stateWaiting]+states[stateOpening]+states["backing-off"],
				"failed", states[stateFailed], "errors", errs, "pool_in_use", n.e.Pool().Stats().InUse)
			last, lastAt, lastRecs = t, now, recs
		}
	}
}
