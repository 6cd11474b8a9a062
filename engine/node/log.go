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

// newLogger builds the node's logger from the node file's log section.
func newLogger(c Log, w io.Writer) (*slog.Logger, error) {
	lvl, err := parseLevel(c.Level)
	if c.Level == "" {
		lvl, err = slog.LevelInfo, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node: log.level: %q: must be debug, info, warn or error", c.Level)
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: redactAttr}
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
			conns := 0
			for _, s := range n.e.Stats().Sources {
				if s.State == engine.Running {
					conns++
				}
			}
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
