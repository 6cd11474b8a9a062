package main

import (
	"bytes"
	"strconv"
)

// The quiet source of sluice-bench's --quiet-source (bench/quiet): one
// connection beside the load that first sends the header line, then its
// clock (CLOCK_REALTIME, Unix nanoseconds, decimal) as a line at a fixed
// interval. The sink times each line as it reads it, now minus the
// stamp: both ends are on one host, so their clocks agree.
const quietHeader = "sluice-quiet"

// isQuiet reports whether a connection whose first read brought p is a
// quiet source.
func isQuiet(p []byte) bool {
	h := quietHeader + "\n"
	n := min(len(p), len(h))
	return n > 0 && string(p[:n]) == h[:n]
}

// QuietReport is what the quiet sources brought, with the fields of
// sluice-bench's quiet.Report. This module imports nothing of sluice (so
// that gnet stays out of sluice's module graph), so the report and the
// line timing below are bench/load's QuietReport and QuietLines written
// again, and must keep their JSON fields.
type QuietReport struct {
	Connections int     `json:"connections"`
	Lines       uint64  `json:"lines"`
	BadLines    uint64  `json:"bad_lines"`
	LatencyNs   []int64 `json:"latency_ns"`
}

// quietLines splits one quiet source's bytes into lines.
type quietLines struct {
	partial []byte
	header  bool
}

// feed times every line p completes, read at now, into r.
func (q *quietLines) feed(p []byte, now int64, r *QuietReport) {
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
			if string(line) != quietHeader {
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
