package node

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// TestNodeMQTTSource runs a node subscribed to an embedded mochi broker:
// published messages reach the engine.
func TestNodeMQTTSource(t *testing.T) {
	srv, broker, subscribed := srcstest.StartMochi(t)

	tn := startNode(t, "sources:\n  - mqtt:\n      broker: "+broker+
		"\n      client_id: node-test\n      topics: [\"sensors/#\"]\n      qos: 1\n"+
		"output:\n  stdout: {}\n")
	url := tn.metricsURL()
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("the node never subscribed")
	}
	const msgs, size = 100, 1000
	for range msgs {
		if err := srv.Publish("sensors/a", []byte(strings.Repeat("m", size)), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(30 * time.Second)
	for tick := time.NewTicker(10 * time.Millisecond); scrapeValue(t, url, "sluice_bytes_received_total") < msgs*size; {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("messages never arrived")
		}
	}
	rep, err := tn.stop()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bytes < msgs*size {
		t.Fatalf("node report: %+v", rep)
	}
	// The stdout output writes each message's payload on a line.
	if want := strings.Repeat(strings.Repeat("m", size)+"\n", msgs); tn.stdout.String() != want {
		t.Fatalf("stdout holds %d bytes, want %d: %.200q", tn.stdout.Len(), len(want), tn.stdout.String())
	}
}
