package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench/report"
)

func TestChildProtocol(t *testing.T) {
	h, e2e := report.NewHist(), report.NewHist()
	for _, v := range []int64{1000, 2000, 3000, 1e6} {
		h.RecordValue(v)
		e2e.RecordValue(2 * v)
	}
	for _, tc := range []struct {
		name    string
		r       *Result
		err     error
		wantErr string
	}{
		{"result", &Result{Runner: "uring", Round: 1, Bytes: 123, CPUS: 0.5, ThreadsMax: 7, RSSMaxBytes: 1 << 20,
			GeneratorBound: true, GenBoundWhy: "lag", Counters: Counters{Enters: 4, Completions: 9}, Hist: h, E2E: e2e}, nil, ""},
		{"no histograms", &Result{Runner: "epoll"}, nil, ""},
		{"error", nil, errors.New("bench: only 3 of 5 connections accepted"), "only 3 of 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := encodeChild(&buf, tc.r, tc.err); err != nil {
				t.Fatal(err)
			}
			got, err := decodeChild(buf.Bytes())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Runner != tc.r.Runner || got.Bytes != tc.r.Bytes || got.ThreadsMax != tc.r.ThreadsMax ||
				got.GeneratorBound != tc.r.GeneratorBound || got.Counters != tc.r.Counters {
				t.Errorf("decoded %+v, want %+v", got, tc.r)
			}
			wantN := int64(0)
			if tc.r.Hist != nil {
				wantN = tc.r.Hist.TotalCount()
			}
			if got.Hist.TotalCount() != wantN || got.E2E.TotalCount() != wantN {
				t.Errorf("histograms hold %d and %d values, want %d", got.Hist.TotalCount(), got.E2E.TotalCount(), wantN)
			}
			if wantN > 0 && (got.Hist.Max() != h.Max() || got.E2E.ValueAtQuantile(50) != e2e.ValueAtQuantile(50)) {
				t.Errorf("histograms changed on the way")
			}
		})
	}
	if _, err := decodeChild([]byte("not json")); err == nil {
		t.Error("garbage accepted")
	}
	if err := RunChild(context.Background(), strings.NewReader("{"), &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("a truncated workload was accepted")
	}
}
