package node

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

type subscribedHook struct {
	mqtt.HookBase
	ch chan struct{}
}

func (h *subscribedHook) ID() string           { return "node-test-subscribed" }
func (h *subscribedHook) Provides(b byte) bool { return b == mqtt.OnSubscribed }
func (h *subscribedHook) OnSubscribed(*mqtt.Client, packets.Packet, []byte) {
	select {
	case h.ch <- struct{}{}:
	default:
	}
}

// TestNodeMQTTSource runs a node subscribed to an embedded mochi broker:
// published messages reach the engine.
func TestNodeMQTTSource(t *testing.T) {
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	hook := &subscribedHook{ch: make(chan struct{}, 1)}
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddHook(hook, nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "t", Address: "127.0.0.1:0"})
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	tn := startNode(t, "sources:\n  - mqtt:\n      broker: "+l.Address()+
		"\n      client_id: node-test\n      topics: [\"sensors/#\"]\n      qos: 1\n"+
		"output:\n  stdout: {}\n")
	url := tn.metricsURL()
	select {
	case <-hook.ch:
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
