package node

import (
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/engine/metrics"
)

// TestWatchingCostsNothingPerConnection: a health probe and a scrape of
// the node's collectors make as many allocations with 400 idle
// connections open as with 8. Watched every few seconds, a node holding
// 100,000 connections must not make garbage per connection each time:
// that garbage is resident memory the operator pays for.
func TestWatchingCostsNothingPerConnection(t *testing.T) {
	tn := startNode(t, "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n")
	addr := tn.addr("tcp")
	reg := prometheus.NewRegistry()
	reg.MustRegister(tn.n.collector(metrics.NewCollector(tn.n.e, metrics.Options{})), listenerCollector{tn.n})
	watch := func() {
		tn.n.Health()
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	allocsAt := func(n int) float64 {
		for len(conns) < n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		until(t, "the connections in /healthz", func() bool {
			h := tn.n.Health()
			return len(h.Sources) == 1 && h.Sources[0].Conns == n
		})
		return testing.AllocsPerRun(20, watch)
	}
	few, many := allocsAt(8), allocsAt(400)
	t.Logf("allocations per health probe and scrape: %.0f with 8 connections, %.0f with 400", few, many)
	if many > few+2 {
		t.Errorf("watching the node allocates %.0f times with 400 connections against %.0f with 8: its cost grows with the connections", many, few)
	}
}
