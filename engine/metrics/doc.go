// Package metrics exports an engine's statistics to Prometheus.
//
// NewCollector returns a prometheus.Collector that reads Engine.Stats and
// Engine.Totals at every scrape; the caller registers it with a registry
// of its choice, so nothing touches Prometheus's global registry:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(e, metrics.Options{}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Per-source series are off by default and capped when on, so ten thousand
// sources never mean ten thousand label sets unless asked for.
package metrics
