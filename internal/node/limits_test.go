package node

import (
	"net"
	"testing"
	"time"
)

// TestNodeRateLimitAndIdleTimeout: a listener's rate_limit holds each
// connection to its rate, as the metrics show, and its idle_timeout closes
// a connection that went quiet, counted.
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
	if holds := scrapeValue(t, tn.metricsURL(), "sluice_rate_limit_holds_total"); holds < 1 {
		t.Errorf("rate limit holds: %v, want some", holds)
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
}
