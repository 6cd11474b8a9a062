package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// subscribed reports when a client's SUBSCRIBE has been handled.
type subscribed struct {
	mqtt.HookBase
	ch chan string
}

func (h *subscribed) ID() string           { return "conformance-subscribed" }
func (h *subscribed) Provides(b byte) bool { return b == mqtt.OnSubscribed }
func (h *subscribed) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	select {
	case h.ch <- cl.ID:
	default:
	}
}

// TestConformanceMQTT subscribes through the engine with every runner as
// its main runner; MQTT sources have no descriptor, so the engine drives
// them on its goroutine runner beside it. 300 QoS 1 messages arrive whole
// and in order, and the broker ends with every one acknowledged.
func TestConformanceMQTT(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
		hook := &subscribed{ch: make(chan string, 4)}
		if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
			t.Fatal(err)
		}
		if err := srv.AddHook(hook, nil); err != nil {
			t.Fatal(err)
		}
		l := listeners.NewTCP(listeners.Config{ID: "c", Address: "127.0.0.1:0"})
		if err := srv.AddListener(l); err != nil {
			t.Fatal(err)
		}
		if err := srv.Serve(); err != nil {
			t.Fatal(err)
		}
		defer srv.Close()

		e, err := engine.New(engine.Config{Runner: runner, Buffers: 32, BufSize: 4096, Flush: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		src, err := srcs.NewMQTT(srcs.MQTTConfig{Broker: l.Address(), ClientID: "sluice-" + runner,
			Topics: []string{"sensors/#"}, QoS: 1, CleanSession: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.AddSource(src); err != nil {
			t.Fatal(err)
		}
		select {
		case <-hook.ch:
		case <-time.After(30 * time.Second):
			t.Fatal("the source never subscribed")
		}
		const n = 300
		var mu sync.Mutex
		var got []srcs.MQTTMessage
		var fr srcs.FrameReader
		var frameErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			pullAll(e, func(c engine.Chunk) {
				mu.Lock()
				defer mu.Unlock()
				fr.Write(c.Data)
				for {
					m, ok, err := fr.Next()
					if err != nil {
						frameErr = err
					}
					if !ok {
						return
					}
					got = append(got, srcs.MQTTMessage{Topic: append([]byte(nil), m.Topic...), Payload: append([]byte(nil), m.Payload...)})
				}
			})
		}()
		for i := range n {
			payload := fmt.Sprintf("reading %d %s", i, make([]byte, i%700))
			if err := srv.Publish(fmt.Sprintf("sensors/%d", i%7), []byte(payload), false, 1); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "300 messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= n || frameErr != nil })
		mu.Lock()
		if frameErr != nil {
			t.Fatal(frameErr)
		}
		for i, m := range got[:n] {
			wantTopic := fmt.Sprintf("sensors/%d", i%7)
			wantPayload := fmt.Sprintf("reading %d %s", i, make([]byte, i%700))
			if string(m.Topic) != wantTopic || string(m.Payload) != wantPayload {
				t.Fatalf("%s: message %d is %q on %q", runner, i, m.Payload[:min(20, len(m.Payload))], m.Topic)
			}
		}
		mu.Unlock()
		// Chunks are released as they are read, so every PUBACK goes out.
		waitUntil(t, "every PUBACK", func() bool { return src.Stats().Acked >= n })
		if err := e.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-done
	})
}
