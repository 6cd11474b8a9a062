package node

import (
	"net"
	"testing"
	"time"
)

// TestNodeRateLimitAndIdleTimeout: a listener's rate_limit holds each
// connection to its rate, as the metrics show, node-wide and under the
// listener's label, and apart from the pool's waits; its idle_timeout
// closes a connection that went quiet, counted.
func TestNodeRateLimitAndIdleTimeout(t *testing.T) {
	tn := startNode(t, "engine: {buffers: 64}\n"+
		"sources:\n"+
		"  - tcp: {listen: 127.0.0.1:0}\n"+
		"    rate_limit: {bytes_per_second: 1MiB}\n"+
		"    idle_timeout: 300ms\n")
	addr := tn.addr("tcp")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A megabyte and a half, sent at once: a second's worth past the
	// burst, which the limit spreads over about half a second.
	start := time.Now()
	go c.Write(make([]byte, 3<<19))
	until(t, "the whole write delivered", func() bool {
		return scrapeValue(t, tn.metricsURL(), "sluice_bytes_received_total") >= 3<<19
	})
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("1.5 MiB at 1 MiB/s took %v", took)
	}
	const label = `{listener="127.0.0.1:0"}`
	holds := scrapeValue(t, tn.metricsURL(), "sluice_rate_limit_holds_total")
	if holds < 1 {
		t.Errorf("rate limit holds: %v, want some", holds)
	}
	// A hold is no pool wait: the pool of 64 buffers never ran short.
	if waits := scrapeValue(t, tn.metricsURL(), "sluice_pool_waits_total"); waits >= holds {
		t.Errorf("pool waits %v beside %v rate-limit holds: the holds are counted as waits", waits, holds)
	}
	if lh := scrapeValue(t, tn.metricsURL(), "sluice_listener_rate_limit_holds_total"+label); lh < 1 || lh > holds {
		t.Errorf("the listener's rate-limit holds: %v, of %v in all", lh, holds)
	}
	// Now quiet: the idle timeout closes the connection.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the quiet connection read data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the quiet connection was never closed")
	}
	until(t, "the idle timeout counted", func() bool {
		return scrapeValue(t, tn.metricsURL(), "sluice_idle_timeouts_total") == 1
	})
	// The connection has ended: its holds stay in the listener's count,
	// which is the node's whole count, since it has no other source.
	until(t, "the connection's end handled", func() bool {
		return scrapeValue(t, tn.metricsURL(), "sluice_listener_connections"+label) == 0
	})
	holds = scrapeValue(t, tn.metricsURL(), "sluice_rate_limit_holds_total")
	for sample, want := range map[string]float64{
		"sluice_listener_rate_limit_holds_total" + label:   holds,
		"sluice_listener_rate_limited_connections" + label: 0,
		"sluice_pool_waiters":                              0,
		"sluice_rate_limited_sources":                      0,
	} {
		if got := scrapeValue(t, tn.metricsURL(), sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	if held := scrapeValue(t, tn.metricsURL(), "sluice_listener_rate_limit_held_seconds_total"+label); held < 0.2 {
		t.Errorf("the listener's connections held %vs, want about half a second", held)
	}
}
