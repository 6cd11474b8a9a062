package metrics_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/metrics"
	"github.com/sluice-io/sluice/internal/testkit/synthetic"
	"github.com/sluice-io/sluice/srcs"
)

// serve starts a promhttp handler for reg on a loopback listener and
// returns its URL; the server is closed when the test ends.
func serve(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return "http://" + ln.Addr().String() + "/metrics"
}

// scrape fetches and parses one exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("scrape lacks %s", name)
	}
	if f.GetType() != typ {
		t.Fatalf("%s is a %v, want %v", name, f.GetType(), typ)
	}
	var v float64
	for _, m := range f.Metric {
		switch typ {
		case dto.MetricType_COUNTER:
			v += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			v += m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v
}

// TestScrapeLiveEngine drives TCP load through an engine and scrapes it
// over HTTP twice: every family is there with its type, and the counters
// move with the load.
func TestScrapeLiveEngine(t *testing.T) {
	e, err := engine.New(engine.Config{Buffers: 64, BufSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(e, metrics.Options{PerSource: 2}))
	url := serve(t, reg)

	before := scrape(t, url)
	if v := value(t, before, "sluice_bytes_received_total", dto.MetricType_COUNTER); v != 0 {
		t.Fatalf("bytes before load: %v", v)
	}

	// Three connections, 100 KB each; the consumer counts what arrives.
	const per, conns = 100_000, 3
	for range conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(strings.Repeat("m", per))); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for got := 0; got < per*conns; {
		c, err := e.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += len(c.Data)
		c.Release()
	}

	after := scrape(t, url)
	for _, tc := range []struct {
		name string
		typ  dto.MetricType
		min  float64
	}{
		{"sluice_bytes_received_total", dto.MetricType_COUNTER, per * conns},
		{"sluice_chunks_emitted_total", dto.MetricType_COUNTER, 1},
		{"sluice_chunks_delivered_total", dto.MetricType_COUNTER, 1},
		{"sluice_delivery_latency_seconds", dto.MetricType_HISTOGRAM, 1},
		{"sluice_pool_acquired_total", dto.MetricType_COUNTER, 1},
		{"sluice_runner_reads_total", dto.MetricType_COUNTER, 1},
		{"sluice_pool_buffers", dto.MetricType_GAUGE, 64},
		{"sluice_pool_buffers_in_use", dto.MetricType_GAUGE, 0},
		{"sluice_pool_waits_total", dto.MetricType_COUNTER, 0},
		{"sluice_source_errors_total", dto.MetricType_COUNTER, 0},
		{"sluice_runner_io_uring_enter_total", dto.MetricType_COUNTER, 0},
		{"sluice_sources", dto.MetricType_GAUGE, conns},
		{"sluice_source_bytes_received_total", dto.MetricType_COUNTER, 1},
		{"sluice_sources_omitted", dto.MetricType_GAUGE, conns - 2},
		{"sluice_rate_limited_sources", dto.MetricType_GAUGE, 0},
		{"sluice_rate_limit_holds_total", dto.MetricType_COUNTER, 0},
		{"sluice_rate_limit_held_seconds_total", dto.MetricType_COUNTER, 0},
		{"sluice_idle_timeouts_total", dto.MetricType_COUNTER, 0},
		{"sluice_source_rate_limit_held_seconds_total", dto.MetricType_COUNTER, 0},
		{"sluice_source_kernel_drops_total", dto.MetricType_COUNTER, 0},
	} {
		if v := value(t, after, tc.name, tc.typ); v < tc.min {
			t.Errorf("%s = %v, want at least %v", tc.name, v, tc.min)
		}
	}
	if n := len(after["sluice_source_bytes_received_total"].Metric); n != 2 {
		t.Errorf("per-source series for %d sources, want the cap of 2", n)
	}
	h := after["sluice_delivery_latency_seconds"].Metric[0].GetHistogram()
	if len(h.Bucket) < len(engine.LatencyBounds) || h.GetSampleCount() != uint64(value(t, after, "sluice_chunks_delivered_total", dto.MetricType_COUNTER)) {
		t.Errorf("latency histogram: %d buckets, %d samples", len(h.Bucket), h.GetSampleCount())
	}
	for _, f := range after["sluice_runner_reads_total"].Metric {
		if len(f.Label) != 1 || f.Label[0].GetName() != "runner" || f.Label[0].GetValue() != e.Runner() && f.Label[0].GetValue() != engine.RunnerGoroutine {
			t.Errorf("runner labels: %v", f.Label)
		}
	}
}

// TestNoPerSourceSeriesByDefault: a default collector exports no series
// per source, however many there are.
func TestNoPerSourceSeriesByDefault(t *testing.T) {
	e, err := engine.New(engine.Config{Buffers: 8, BufSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	for range 50 {
		src, err := synthetic.New(synthetic.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.AddSource(src); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(e, metrics.Options{}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "sluice_source_") && f.GetName() != "sluice_source_errors_total" || f.GetName() == "sluice_sources_omitted" {
			t.Errorf("default collector exports %s", f.GetName())
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "source" {
					t.Errorf("%s has a source label", f.GetName())
				}
			}
		}
	}
}
