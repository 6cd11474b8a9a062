package srcstest

import (
	"crypto/tls"
	"log/slog"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// subscribedHook tells the test which clients subscribed.
type subscribedHook struct {
	mqtt.HookBase
	subscribed chan string
}

func (h *subscribedHook) ID() string           { return "test-subscribed" }
func (h *subscribedHook) Provides(b byte) bool { return b == mqtt.OnSubscribed }
func (h *subscribedHook) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	select {
	case h.subscribed <- cl.ID:
	default:
	}
}

// StartMochi runs an embedded mochi MQTT broker on a free loopback port,
// allowing every client, with an inline client for publishing, until the
// test ends. It returns the broker, its address, and the ids of clients
// as they subscribe.
func StartMochi(t testing.TB) (srv *mqtt.Server, addr string, subscribed <-chan string) {
	t.Helper()
	return startMochi(t, nil)
}

// StartMochiTLS is StartMochi with a TLS listener serving tc.
func StartMochiTLS(t testing.TB, tc *tls.Config) (srv *mqtt.Server, addr string, subscribed <-chan string) {
	t.Helper()
	return startMochi(t, tc)
}

func startMochi(t testing.TB, tc *tls.Config) (srv *mqtt.Server, addr string, subscribed <-chan string) {
	t.Helper()
	srv = mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	hook := &subscribedHook{subscribed: make(chan string, 16)}
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddHook(hook, nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "t", Address: "127.0.0.1:0", TLSConfig: tc})
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, l.Address(), hook.subscribed
}
