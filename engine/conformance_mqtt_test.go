package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// subscribed reports when a client's SUBSCRIBE has been handled.
// mqttCollector decodes an MQTT source's chunks as they are pulled.
type mqttCollector struct {
	version byte

	mu   sync.Mutex
	msgs []mqtt.MQTTMessage // copies
	err  error              // the first chunk that did not decode
	errs []error            // from the engine's error handler
}

func (c *mqttCollector) chunk(ch engine.Chunk) {
	if ch.Flags&srcs.EndOfStream != 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.Flags&srcs.Records == 0 && c.err == nil {
		c.err = fmt.Errorf("a chunk of %d bytes without the Records flag (%v)", len(ch.Data), ch.Flags)
	}
	err := mqtt.ForEachMQTTMessage(ch.Data, c.version, func(m mqtt.MQTTMessage) error {
		c.msgs = append(c.msgs, mqtt.MQTTMessage{Topic: append([]byte(nil), m.Topic...), Payload: append([]byte(nil), m.Payload...)})
		return nil
	})
	if err != nil && !(ch.Flags&srcs.Truncated != 0 && errors.Is(err, io.ErrUnexpectedEOF)) && c.err == nil {
		c.err = fmt.Errorf("chunk %d (%v): %w", ch.Seq, ch.Flags, err)
	}
}

func (c *mqttCollector) handle(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// count returns the messages so far, failing the test on a chunk that
// did not decode.
func (c *mqttCollector) count(t *testing.T) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		t.Fatal(c.err)
	}
	return len(c.msgs)
}

// mqttCase subscribes through the engine, in MQTT 3.1.1 and 5: the source's
// socket is read by the runner itself, framed into whole MQTT packets.
// 300 QoS 1 messages arrive whole and in order, and the broker ends with
// every one acknowledged.
func mqttCase(t *testing.T, runner string) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) { mqttVersion(t, runner, version) })
	}
}

func mqttVersion(t *testing.T, runner string, version byte) {
	t.Setenv(engine.EnvRunner, "")
	srv, broker, subscribed := srcstest.StartMochi(t)

	col := &mqttCollector{version: version}
	e, err := engine.New(engine.Config{Runner: runner, Buffers: 32, BufSize: 4096, Flush: time.Millisecond},
		engine.WithErrorHandler(col.handle))
	if err != nil {
		t.Fatal(err)
	}
	src, err := mqtt.NewMQTT(mqtt.MQTTConfig{Broker: broker, ClientID: "sluice-" + runner,
		Topics: []string{"sensors/#"}, QoS: 1, Version: version, CleanSession: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddSource(src); err != nil {
		t.Fatal(err)
	}
	defer pullUntilShutdown(t, e, col.chunk)()
	select {
	case <-subscribed:
	case <-time.After(30 * time.Second):
		t.Fatal("the source never subscribed")
	}
	const n = 300
	for i := range n {
		payload := fmt.Sprintf("reading %d %s", i, make([]byte, i%700))
		if err := srv.Publish(fmt.Sprintf("sensors/%d", i%7), []byte(payload), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "300 messages", func() bool { return col.count(t) >= n })
	col.mu.Lock()
	for i, m := range col.msgs[:n] {
		wantTopic := fmt.Sprintf("sensors/%d", i%7)
		wantPayload := fmt.Sprintf("reading %d %s", i, make([]byte, i%700))
		if string(m.Topic) != wantTopic || string(m.Payload) != wantPayload {
			col.mu.Unlock()
			t.Fatalf("%s: message %d is %q on %q", runner, i, m.Payload[:min(20, len(m.Payload))], m.Topic)
		}
	}
	if len(col.errs) != 0 {
		col.mu.Unlock()
		t.Fatalf("%s: errors %v", runner, col.errs)
	}
	col.mu.Unlock()
	// Chunks are released as they are read, so every PUBACK goes out.
	waitUntil(t, "every PUBACK", func() bool { return src.Stats().Acked >= n })
	if st := src.Stats(); st.Sessions != 1 || st.Subscribes != 1 || st.Messages != n {
		t.Fatalf("%s: stats %+v", runner, st)
	}
	if st := e.Stats(); st.Runner != runner || len(st.Runners) != 1 {
		t.Fatalf("the source did not run on the %s runner alone: %+v", runner, st.Runners)
	}
}

// mqttMosquittoRestart subscribes at QoS 1 to a real mosquitto through
// the engine, restarts the broker mid-stream while a publisher keeps
// publishing, and checks that the engine reconnects and every message
// published after the subscriber has subscribed again arrives. Duplicates
// are allowed (QoS 1 is at least once).
func mqttMosquittoRestart(t *testing.T, runner string) {
	bin := srcstest.RequireMosquitto(t)
	t.Setenv(engine.EnvRunner, "")
	broker, err := mosquitto.Start(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Kill()
	const topic = "sluice/seq"
	col := &mqttCollector{version: 5}
	e, err := engine.New(engine.Config{Runner: runner, Buffers: 64, BufSize: 4096, Flush: time.Millisecond},
		engine.WithErrorHandler(col.handle))
	if err != nil {
		t.Fatal(err)
	}
	src, err := mqtt.NewMQTT(mqtt.MQTTConfig{Broker: broker.Addr, ClientID: "sluice-test-" + runner, Topics: []string{topic},
		QoS: 1, Version: 5, DialTimeout: 2 * time.Second,
		Backoff: srcs.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddSource(src); err != nil {
		t.Fatal(err)
	}
	defer pullUntilShutdown(t, e, col.chunk)()
	waitUntil(t, "the first SUBACK", func() bool { return src.Stats().Subscribes >= 1 })
	pub := mosquitto.StartPublisher(broker.Addr, topic)
	defer pub.Halt()
	waitUntil(t, "messages before the restart", func() bool { return col.count(t) >= 200 })

	broker.Kill()
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the source to subscribe again", func() bool { return src.Stats().Subscribes >= 2 })
	from := pub.Sending() + 1 // every number first sent from now on reaches the new subscription
	waitUntil(t, "messages after the restart", func() bool { return pub.Confirmed() >= from+500 })
	pub.Halt()
	last := pub.Confirmed()

	missing := func() int64 {
		col.mu.Lock()
		defer col.mu.Unlock()
		seen := map[int64]bool{}
		for _, m := range col.msgs {
			n, err := strconv.ParseInt(string(m.Payload), 10, 64)
			if err != nil || string(m.Topic) != topic {
				t.Errorf("message %q on %q", m.Payload, m.Topic)
			}
			seen[n] = true
		}
		var miss int64
		for n := from; n < last; n++ {
			if !seen[n] {
				miss++
			}
		}
		return miss
	}
	waitUntil(t, "every message published after the resubscribe", func() bool { return col.count(t) > 0 && missing() == 0 })
	if st := src.Stats(); st.Sessions < 2 {
		t.Fatalf("%s: stats %+v: the source never reconnected", runner, st)
	}
	t.Logf("%s: %d messages, %d after the resubscribe; source %+v", runner, col.count(t), last-from, src.Stats())
}

// mqttKeepaliveTimeout: a broker that accepts the session and then goes
// silent is cut after 1.5 × KeepAlive, and the engine reports why
// (srcs.ErrTimeout), although the runner saw only the socket's end.
func mqttKeepaliveTimeout(t *testing.T, runner string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 512)
		c.Read(buf)                             // CONNECT
		c.Write([]byte{0x20, 0x02, 0x00, 0x00}) // CONNACK: accepted, no session
		c.Read(buf)                             // SUBSCRIBE, packet id 1
		c.Write([]byte{0x90, 0x03, 0x00, 0x01, 0x00})
		// Silent from here on: PINGREQs go unanswered.
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
	t.Setenv(engine.EnvRunner, "")
	errs := make(chan error, 16)
	e, err := engine.New(engine.Config{Runner: runner, Buffers: 16},
		engine.WithHandler(func(c engine.Chunk) { c.Release() }),
		engine.WithErrorHandler(func(err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	src, err := mqtt.NewMQTT(mqtt.MQTTConfig{Broker: ln.Addr().String(), ClientID: "silent", Topics: []string{"t"},
		KeepAlive: 500 * time.Millisecond, Backoff: srcs.Backoff{Initial: time.Hour, Max: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddSource(src); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(15 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, srcs.ErrTimeout) {
				return
			}
			t.Logf("error before the timeout: %v", err)
		case <-deadline:
			t.Fatal("no keepalive timeout reported")
		}
	}
}
