package load

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench/report"
)

func TestQuietLines(t *testing.T) {
	const now = 1_000_000_000
	for _, tc := range []struct {
		name    string
		reads   []string
		lines   uint64
		bad     uint64
		latency []int64
		isQuiet bool
	}{
		{"header and stamps in one read", []string{"sluice-quiet\n999999000\n999000000\n"}, 2, 0, []int64{1000, 1000000}, true},
		{"a stamp split over reads", []string{"sluice-quiet\n9999", "99000", "\n"}, 1, 0, []int64{1000}, true},
		{"the header split", []string{"sluice-", "quiet\n999999999\n"}, 1, 0, []int64{1}, true},
		{"an unfinished line is not timed", []string{"sluice-quiet\n999999000\n99999"}, 1, 0, []int64{1000}, true},
		{"not a number", []string{"sluice-quiet\nten\n\n999999000\n"}, 1, 2, []int64{1000}, true},
		{"a wrong header", []string{"sluice-q\n999999000\n"}, 1, 1, []int64{1000}, false},
		{"bulk bytes", []string{"\x00\x01sluice-quiet\n"}, 0, 1, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsQuiet([]byte(tc.reads[0])); got != tc.isQuiet {
				t.Errorf("IsQuiet(%q) = %v", tc.reads[0], got)
			}
			var q QuietLines
			var r QuietReport
			for _, p := range tc.reads {
				q.Feed([]byte(p), now, &r)
			}
			if r.Lines != tc.lines || r.BadLines != tc.bad || len(r.LatencyNs) != len(tc.latency) {
				t.Fatalf("%d lines, %d bad, latencies %v; want %d, %d, %v", r.Lines, r.BadLines, r.LatencyNs, tc.lines, tc.bad, tc.latency)
			}
			for i := range tc.latency {
				if r.LatencyNs[i] != tc.latency[i] {
					t.Errorf("latencies %v, want %v", r.LatencyNs, tc.latency)
				}
			}
		})
	}
}

func TestQuietReportAggregates(t *testing.T) {
	var r QuietReport
	r.Merge(&QuietReport{Connections: 1, Lines: 3, LatencyNs: []int64{3e6, 1e6, 2e6}})
	r.Merge(&QuietReport{Connections: 1, Lines: 2, BadLines: 1, LatencyNs: []int64{40e6, -5}})
	if r.Connections != 2 || r.Lines != 5 || r.BadLines != 1 || len(r.LatencyNs) != 5 {
		t.Fatalf("merged %+v", r)
	}
	s := report.Summarize(r.Hist())
	// A latency below zero (a clock step) counts at the floor, 1 ns.
	if s.Count != 5 || s.Max < 39.9e6 || s.Max > 40.1e6 || s.P50 < 1.99e6 || s.P50 > 2.01e6 || r.Hist().Min() != 1 {
		t.Errorf("summary %+v, min %d", s, r.Hist().Min())
	}
	if got := (*QuietReport)(nil).Hist().TotalCount(); got != 0 {
		t.Errorf("no report: %d values", got)
	}
	for _, tc := range []struct {
		sent uint64
		got  *QuietReport
		want string
	}{
		{3, &QuietReport{Connections: 1, Lines: 3}, ""},
		{3, nil, "no quiet connection"},
		{3, &QuietReport{Connections: 2, Lines: 3}, "saw 2"},
		{3, &QuietReport{Connections: 1, Lines: 2}, "timed 2"},
		{3, &QuietReport{Connections: 1, Lines: 3, BadLines: 1}, "could not read 1"},
	} {
		got := QuietMismatch(tc.sent, tc.got)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("QuietMismatch(%d, %+v) = %q, want %q", tc.sent, tc.got, got, tc.want)
		}
	}
}

// TestQuietSource: what the quiet source sends over a real connection is
// read back as its header and one timed line per stamp it counted.
func TestQuietSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan QuietReport, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- QuietReport{}
			return
		}
		defer c.Close()
		var q QuietLines
		r := QuietReport{Connections: 1}
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			q.Feed(buf[:n], time.Now().UnixNano(), &r)
			if err != nil {
				got <- r
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { close(stop) })
	sent, err := sendQuiet(context.Background(), c, 5*time.Millisecond, stop)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if sent < 2 || QuietMismatch(sent, &r) != "" {
		t.Fatalf("sent %d: %s (%+v)", sent, QuietMismatch(sent, &r), r)
	}
	for _, ns := range r.LatencyNs {
		if ns < 0 || ns > int64(10*time.Second) {
			t.Errorf("latency %v", time.Duration(ns))
		}
	}
}
