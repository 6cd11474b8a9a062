package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/engine/metrics"
	"github.com/sluice-io/sluice/srcs"
)

// serveHTTP starts the endpoint: /metrics, /healthz and, if asked,
// /debug/pprof/, on a registry and mux of the node's own, behind the web
// configuration file's TLS and basic authentication if there is one.
func (n *Node) serveHTTP(addr string, withPprof bool) (*httpServer, error) {
	webConfig := n.cfg.Metrics.WebConfigFile
	var wc webSummary
	if webConfig != "" {
		var err error
		if wc, err = checkWebConfig(webConfig); err != nil {
			return nil, &ConfigError{File: n.path, Key: "metrics.web_config_file", Msg: err.Error()}
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.collector(metrics.NewCollector(n.e, metrics.Options{PerSource: n.cfg.Metrics.PerSource})),
		listenerCollector{n},
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
		if wc.users == 0 {
			n.log.Warn("/debug/pprof/ is served without a password (basic_auth_users in metrics.web_config_file asks for one)")
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", listenError(addr, err))
	}
	// The server's own complaints (failed TLS handshakes, mostly: a
	// scanner, a plaintext scrape) go to the log at debug.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)}
	h := &httpServer{addr: ln.Addr().String(), scheme: "http", srv: srv, done: make(chan struct{})}
	if wc.tls {
		h.scheme = "https"
	}
	// The toolkit logs that it listens and whether TLS is on; at debug,
	// since "node ready" says where the endpoint is.
	wlog := slog.New(levelShift{n.log.Handler()})
	go func() {
		defer close(h.done)
		err := web.Serve(ln, h.srv, &web.FlagConfig{WebConfigFile: &webConfig, WebListenAddresses: &[]string{addr}}, wlog)
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	return h, nil
}

// webSummary is what the node says of a web configuration file.
type webSummary struct {
	tls   bool // tls_server_config is set
	users int  // basic_auth_users
}

// checkWebConfig checks a Prometheus web configuration file as the
// toolkit will read it (its keys, its certificates, its users' bcrypt
// hashes) and says what it asks for.
func checkWebConfig(path string) (webSummary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return webSummary{}, err
	}
	var c struct {
		TLS   web.TLSConfig     `yaml:"tls_server_config"`
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return webSummary{}, fmt.Errorf("%s: %w", path, err)
	}
	for user, hash := range c.Users {
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return webSummary{}, fmt.Errorf(`%s: basic_auth_users: %s: not a bcrypt hash (%v); make one with htpasswd -nBC 10 "" | tr -d ':\n'`,
				path, user, err)
		}
	}
	if err := web.Validate(path); err != nil {
		if !strings.Contains(err.Error(), path) {
			err = fmt.Errorf("%s: %w", path, err)
		}
		return webSummary{}, err
	}
	return webSummary{tls: c.TLS.IsEnabled(), users: len(c.Users)}, nil
}

// levelShift logs Info and below at Debug.
type levelShift struct{ slog.Handler }

func (l levelShift) Handle(ctx context.Context, r slog.Record) error {
	if r.Level <= slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	if !l.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

func (l levelShift) Enabled(context.Context, slog.Level) bool { return true }

func (l levelShift) WithAttrs(as []slog.Attr) slog.Handler {
	return levelShift{l.Handler.WithAttrs(as)}
}

func (l levelShift) WithGroup(g string) slog.Handler { return levelShift{l.Handler.WithGroup(g)} }

// Listener refusal reasons, as the reason label names them.
var refusalReasons = []struct {
	reason string
	count  func(srcs.ListenerStats) uint64
}{
	{"denied", func(s srcs.ListenerStats) uint64 { return s.Denied }},
	{"proxy_refused", func(s srcs.ListenerStats) uint64 { return s.ProxyRefused }},
	{"handshake_timeout", func(s srcs.ListenerStats) uint64 { return s.HandshakeTimeouts }},
	{"tls_failed", func(s srcs.ListenerStats) uint64 { return s.TLSFailures }},
	{"cert_rejected", func(s srcs.ListenerStats) uint64 { return s.CertRejected }},
}

var (
	descAccepted = prometheus.NewDesc("sluice_listener_accepted_total",
		"Connections a listener accepted (past its allow-list and handshakes).", []string{"listener"}, nil)
	descRefused = prometheus.NewDesc("sluice_listener_refused_total",
		"Connections a listener closed at accept or in their handshake, by reason: denied (not in allow), "+
			"proxy_refused, handshake_timeout, tls_failed, cert_rejected.", []string{"listener", "reason"}, nil)
	descConns = prometheus.NewDesc("sluice_listener_connections",
		"A listener's connections open now.", []string{"listener"}, nil)
	descConnsFailed = prometheus.NewDesc("sluice_listener_connections_failed_total",
		"A listener's connections that ended on an error (a reset, a read error) rather than a clean close.", []string{"listener"}, nil)
	descRateHolds = prometheus.NewDesc("sluice_listener_rate_limit_holds_total",
		"Times a listener's rate_limit held one of its connections.", []string{"listener"}, nil)
	descRateHeld = prometheus.NewDesc("sluice_listener_rate_limit_held_seconds_total",
		"Time a listener's connections spent held by its rate_limit, holds in progress included.", []string{"listener"}, nil)
	descRateLimited = prometheus.NewDesc("sluice_listener_rate_limited_connections",
		"A listener's connections its rate_limit holds now.", []string{"listener"}, nil)
)

// listenerCollector exports the counters of the node file's tcp and unix
// listeners, labelled with the address or path as the file writes it.
type listenerCollector struct{ n *Node }

func (listenerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAccepted, descRefused, descConns, descConnsFailed, descRateHolds, descRateHeld, descRateLimited} {
		ch <- d
	}
}

func (c listenerCollector) Collect(ch chan<- prometheus.Metric) {
	c.n.mu.Lock()
	var lns []*entry
	for _, en := range c.n.entries {
		if en.ln != nil {
			lns = append(lns, en)
		}
	}
	c.n.mu.Unlock()
	for _, en := range lns {
		label := listenerLabel(en, lns)
		st := en.ln.Stats()
		ch <- prometheus.MustNewConstMetric(descAccepted, prometheus.CounterValue, float64(st.Accepted), label)
		for _, r := range refusalReasons {
			ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(r.count(st)), label, r.reason)
		}
		en.mu.Lock()
		open := en.conns
		en.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(open), label)
		ch <- prometheus.MustNewConstMetric(descConnsFailed, prometheus.CounterValue, float64(en.connsFailed.Load()), label)
		if en.cfg.RateLimit != nil {
			holds, held, limited := c.n.listenerRates(en)
			ch <- prometheus.MustNewConstMetric(descRateHolds, prometheus.CounterValue, float64(holds), label)
			ch <- prometheus.MustNewConstMetric(descRateHeld, prometheus.CounterValue, held.Seconds(), label)
			ch <- prometheus.MustNewConstMetric(descRateLimited, prometheus.GaugeValue, float64(limited), label)
		}
	}
}

// listenerRates sums the rate-limit holds of a listener's connections:
// those that ended, and those live now, which it reads one by one (only
// for a listener with a rate_limit, and with no allocation per
// connection). The sums never go below what an earlier scrape showed.
func (n *Node) listenerRates(en *entry) (holds uint64, held time.Duration, limited int) {
	n.idMu.RLock()
	holds, held = en.rateHolds.Load(), time.Duration(en.rateHeld.Load())
	for id, owner := range n.byID {
		if owner != en {
			continue
		}
		if st, ok := n.e.SourceStats(id); ok {
			holds += st.RateHolds
			held += st.RateHeld
			if st.RateLimited {
				limited++
			}
		}
	}
	n.idMu.RUnlock()
	en.mu.Lock()
	defer en.mu.Unlock()
	en.rateShown.holds = max(en.rateShown.holds, holds)
	en.rateShown.held = max(en.rateShown.held, held)
	return en.rateShown.holds, en.rateShown.held, limited
}

// listenerLabel is a listener's listen address (or socket path) as the
// node file writes it; when two listeners write the same (port 0, or
// reuse_port), each gets its place in the file after it.
func listenerLabel(en *entry, all []*entry) string {
	listen := en.listen()
	for _, o := range all {
		if o != en && o.listen() == listen {
			return fmt.Sprintf("%s (sources[%d])", listen, en.index)
		}
	}
	return listen
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
	n.mu.Lock()
	entries := append([]*entry(nil), n.entries...)
	draining := n.draining
	n.mu.Unlock()
	h := Health{Status: "ok"}
	for _, en := range entries {
		// The engine is asked per entry, not for every live source: a
		// probe costs the same with 100,000 connections open.
		en.mu.Lock()
		st, id, hasID := en.state, en.id, en.hasID
		en.mu.Unlock()
		if (st == stateOpening || st == stateRunning) && hasID {
			if s, ok := n.e.SourceStats(id); ok {
				st = s.State.String()
			}
		}
		en.mu.Lock()
		sh := SourceHealth{Source: en.name, State: st, Conns: en.conns}
		if en.err != nil && st != stateRunning {
			sh.Err = describeErr(en.err)
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
