package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sluice-io/sluice/bench/report"
)

// The quiet source (`run --quiet-source`) is one connection beside a
// bulk load that sends almost nothing: first the line QuietHeader, then
// its clock as a line at a fixed interval, CLOCK_REALTIME in Unix
// nanoseconds, decimal. The sink hands each line to a handler that takes
// now minus the stamp: how long a source with little to say waits behind
// the load before its bytes reach the consumer. Sender and sink run on
// one host (the wire is a veth pair between two network namespaces,
// which share the host's clocks), so the two clocks are one.
const QuietHeader = "sluice-quiet"

// DefaultQuietEvery is the quiet source's interval.
const DefaultQuietEvery = 20 * time.Millisecond

// IsQuiet reports whether a connection whose first bytes are p is a quiet
// source: they begin its header line (a first read shorter than the
// header is taken for one if it matches as far as it goes; QuietLines
// then checks the whole line).
func IsQuiet(p []byte) bool {
	h := QuietHeader + "\n"
	n := min(len(p), len(h))
	return n > 0 && string(p[:n]) == h[:n]
}

// QuietReport is what a sink's quiet sources brought: the lines, the
// lines that were not stamps, and each stamp's latency, in the order
// read. The reference sinks of bench/gnetsink write the same fields.
type QuietReport struct {
	Connections int     `json:"connections"`
	Lines       uint64  `json:"lines"`
	BadLines    uint64  `json:"bad_lines"`
	LatencyNs   []int64 `json:"latency_ns"`
}

// Hist returns the latencies as a histogram; a latency below the
// histogram's floor (the clock read before the stamp, which one host's
// clock does not allow, or a step of the clock) counts at the floor.
func (r *QuietReport) Hist() *hdrhistogram.Histogram {
	h := report.NewHist()
	if r == nil {
		return h
	}
	for _, ns := range r.LatencyNs {
		h.RecordValue(min(max(ns, 1), report.HistMax))
	}
	return h
}

// QuietLines splits one quiet source's bytes into lines and times them.
// It is not safe for concurrent use: a source's bytes arrive in order, on
// one goroutine at a time.
type QuietLines struct {
	partial []byte
	header  bool
}

// Feed times every line p completes, read at now (UnixNano), into r.
func (q *QuietLines) Feed(p []byte, now int64, r *QuietReport) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			q.partial = append(q.partial, p...)
			return
		}
		line := p[:i]
		if len(q.partial) > 0 {
			line = append(q.partial, line...)
			q.partial = q.partial[:0]
		}
		p = p[i+1:]
		if !q.header {
			q.header = true
			if string(line) != QuietHeader {
				r.BadLines++
			}
			continue
		}
		sent, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil || sent <= 0 {
			r.BadLines++
			continue
		}
		r.Lines++
		r.LatencyNs = append(r.LatencyNs, now-sent)
	}
}

// Merge adds o's lines to r.
func (r *QuietReport) Merge(o *QuietReport) {
	r.Connections += o.Connections
	r.Lines += o.Lines
	r.BadLines += o.BadLines
	r.LatencyNs = append(r.LatencyNs, o.LatencyNs...)
}

// QuietConfig configures the quiet source's process (hidden subcommand
// quiet): where it connects and how often it sends. The bench starts it
// on the load's CPUs.
type QuietConfig struct {
	Addr  string
	Every time.Duration
}

// RegisterFlags defines c's flags on fs.
func (c *QuietConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "the sink's `ADDR`")
	fs.DurationVar(&c.Every, "every", DefaultQuietEvery, "send a line this often")
}

// Validate checks c, naming the flag at fault.
func (c QuietConfig) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("--addr: the sink's address is needed")
	case c.Every <= 0:
		return fmt.Errorf("--every: %v: must be positive", c.Every)
	}
	return nil
}

// QuietSent is the quiet source's report: the stamps it sent.
type QuietSent struct {
	Lines uint64 `json:"lines"`
}

// RunQuiet is the quiet source: it connects to c.Addr, sends the header
// and then a stamp every c.Every until in reaches its end (the bench
// closes it when the load is done) or ctx ends, closes the connection,
// and writes a QuietSent line to out.
func RunQuiet(ctx context.Context, c QuietConfig, in io.Reader, out io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("quiet source: %w", err)
	}
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, in)
		close(done)
	}()
	sent, err := sendQuiet(ctx, conn, c.Every, done)
	if cerr := conn.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("quiet source: %w", cerr)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(QuietSent{Lines: sent})
}

// sendQuiet writes the header and a stamp every interval to w until stop
// closes or ctx ends, and returns how many stamps it wrote. A stamp is
// taken just before its write, so a write that waits for window shows
// in the sink's figure as the time the line took, not as a late send.
func sendQuiet(ctx context.Context, w io.Writer, every time.Duration, stop <-chan struct{}) (uint64, error) {
	bw := bufio.NewWriterSize(w, 64)
	var sent uint64
	line := []byte(QuietHeader + "\n")
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		line = strconv.AppendInt(line, time.Now().UnixNano(), 10)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return sent, fmt.Errorf("quiet source: %w", err)
		}
		if err := bw.Flush(); err != nil {
			return sent, fmt.Errorf("quiet source: %w", err)
		}
		sent++
		line = line[:0]
		select {
		case <-tick.C:
		case <-stop:
			return sent, nil
		case <-ctx.Done():
			return sent, nil
		}
	}
}

// QuietSummary is a row's quiet source over its rounds: the stamps sent,
// the lines the sink timed, and their latency.
type QuietSummary struct {
	Sent      uint64         `json:"sent"`
	Lines     uint64         `json:"lines"`
	BadLines  uint64         `json:"bad_lines"`
	LatencyNs report.Latency `json:"latency_ns"`
}

// QuietMismatch says how what the sink timed differs from what the quiet
// source sent ("" when they agree): every stamp must arrive as one good
// line.
func QuietMismatch(sent uint64, got *QuietReport) string {
	switch {
	case got == nil || got.Connections == 0:
		return fmt.Sprintf("quiet source: sent %d lines, the sink saw no quiet connection", sent)
	case got.Connections != 1:
		return fmt.Sprintf("quiet source: one connection, the sink saw %d", got.Connections)
	case got.Lines != sent || got.BadLines != 0:
		return fmt.Sprintf("quiet source: sent %d lines, the sink timed %d and could not read %d", sent, got.Lines, got.BadLines)
	}
	return ""
}
