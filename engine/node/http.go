package node

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/engine/metrics"
)

// serveHTTP starts the endpoint: /metrics, /healthz and, if asked,
// /debug/pprof/, on a registry and mux of the node's own.
func (n *Node) serveHTTP(addr string, withPprof bool) (*httpServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.collector(metrics.NewCollector(n.e, metrics.Options{PerSource: n.cfg.Metrics.PerSource})),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if p := n.pub; p != nil {
		counter := func(name, help string, f func(jetstream.Stats) uint64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_jetstream_" + name, Help: help},
				func() float64 { return float64(f(p.Stats())) })
		}
		reg.MustRegister(
			counter("published_total", "Chunks published to JetStream.", func(s jetstream.Stats) uint64 { return s.Published }),
			counter("acked_total", "Chunks JetStream acknowledged (then released).", func(s jetstream.Stats) uint64 { return s.Acked }),
			counter("retries_total", "Publishes sent again after an error or a timeout.", func(s jetstream.Stats) uint64 { return s.Retries }),
			counter("duplicates_total", "Acknowledgements JetStream flagged as duplicates.", func(s jetstream.Stats) uint64 { return s.Duplicates }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_jetstream_pending", Help: "Chunks awaiting their acknowledgement."},
				func() float64 { return float64(p.Stats().Pending) }))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", n.serveHealth)
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node: metrics endpoint: %w", err)
	}
	h := &httpServer{addr: ln.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.srv.Serve(ln)
	}()
	return h, nil
}

// nodeCollector is the engine's collector with one series changed:
// sluice_sources{state="failed"} counts the node file's sources that
// failed (the engine forgets a source once it has ended, so its own count
// of failed sources is only ever momentary).
type nodeCollector struct {
	inner   prometheus.Collector
	sources *prometheus.Desc
	n       *Node
}

func (n *Node) collector(inner prometheus.Collector) prometheus.Collector {
	c := &nodeCollector{inner: inner, n: n}
	ch := make(chan *prometheus.Desc)
	go func() { inner.Describe(ch); close(ch) }()
	for d := range ch {
		if strings.Contains(d.String(), `fqName: "sluice_sources"`) {
			c.sources = d
		}
	}
	return c
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) { c.inner.Describe(ch) }

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	in := make(chan prometheus.Metric)
	go func() { c.inner.Collect(in); close(in) }()
	for m := range in {
		if c.sources != nil && m.Desc() == c.sources {
			var d dto.Metric
			if m.Write(&d) == nil && len(d.Label) == 1 && d.Label[0].GetValue() == stateFailed {
				continue
			}
		}
		ch <- m
	}
	if c.sources != nil {
		failed := 0
		for _, s := range c.n.Health().Sources {
			if s.State == stateFailed {
				failed++
			}
		}
		ch <- prometheus.MustNewConstMetric(c.sources, prometheus.GaugeValue, float64(failed), stateFailed)
	}
}

// Health is what /healthz reports.
type Health struct {
	// Status is ok, starting (a source of the node file still opening or
	// waiting), failed (a source failed, or the output cannot write), or
	// draining.
	Status  string         `json:"status"`
	Sources []SourceHealth `json:"sources"`
	Output  string         `json:"output,omitempty"` // the output's write error, if any
}

// SourceHealth is one source of the node file.
type SourceHealth struct {
	Source string `json:"source"` // kind and address or path
	State  string `json:"state"`  // opening, waiting, running, backing-off, done, stopped or failed
	Conns  int    `json:"conns,omitempty"`
	Err    string `json:"error,omitempty"`
}

// Health returns the node's health: its sources' states, and whether it
// is draining. Safe for concurrent use.
func (n *Node) Health() Health {
	live := map[uint64]engine.State{}
	for _, s := range n.e.Stats().Sources {
		live[uint64(s.ID)] = s.State
	}
	n.mu.Lock()
	entries := append([]*entry(nil), n.entries...)
	draining := n.draining
	n.mu.Unlock()
	h := Health{Status: "ok"}
	for _, en := range entries {
		en.mu.Lock()
		st := en.state
		if (st == stateOpening || st == stateRunning) && en.hasID {
			if s, ok := live[uint64(en.id)]; ok {
				st = s.String()
			}
		}
		sh := SourceHealth{Source: en.name, State: st, Conns: len(en.conns)}
		if en.err != nil && st != stateRunning {
			sh.Err = unwrapSource(en.err).Error()
		}
		en.mu.Unlock()
		switch {
		case st == stateFailed:
			h.Status = "failed"
		case (st == stateOpening || st == stateWaiting) && h.Status == "ok":
			h.Status = "starting"
		}
		h.Sources = append(h.Sources, sh)
	}
	if w, ok := n.out.(*writerOutput); ok {
		if err := w.writeErr(); err != nil {
			h.Output, h.Status = err.Error(), "failed"
		}
	}
	if draining {
		h.Status = "draining"
	}
	return h
}

// serveHealth answers 200 while the node is ok or starting, 503 when a
// source failed or the node drains, with the Health as JSON.
func (n *Node) serveHealth(w http.ResponseWriter, _ *http.Request) {
	h := n.Health()
	w.Header().Set("Content-Type", "application/json")
	if h.Status != "ok" && h.Status != "starting" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(h)
}
