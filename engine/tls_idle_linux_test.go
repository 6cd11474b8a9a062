package engine_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/internal/testkit/testca"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// TestTLSIdleHoldsNoBuffer opens many TLS sessions that send a line and
// then idle, plus some that send nothing, on every runner (TLS sessions
// take the goroutine runner whichever it is): once the lines are in, the
// idle sessions hold no pool buffer, though there are more of them than
// buffers; then every session sends again and each stream arrives
// byte-exact.
func TestTLSIdleHoldsNoBuffer(t *testing.T) {
	const (
		conns   = 200
		buffers = 64 // fewer than the sessions: held buffers would run out
	)
	ca := testca.New(t, "engine-tls-idle")
	srv := ca.Server(t, "server")
	for _, runner := range []string{engine.RunnerURing, engine.RunnerGoroutine} {
		t.Run(runner, func(t *testing.T) {
			requireRunner(t, runner)
			ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{TLS: &srcs.TLSConfig{CertFile: srv.CertFile, KeyFile: srv.KeyFile}})
			if err != nil {
				t.Fatal(err)
			}
			e, err := engine.New(engine.Config{Runner: runner, Buffers: buffers, BufSize: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.AddListener(ln); err != nil {
				t.Fatal(err)
			}
			var (
				mu  sync.Mutex
				got = map[string][]byte{} // by the client's address
			)
			done := make(chan struct{})
			go func() {
				defer close(done)
				pullAll(e, func(c engine.Chunk) {
					mu.Lock()
					k := strings.TrimPrefix(c.Name, "tls://")
					got[k] = append(got[k], c.Data...)
					mu.Unlock()
				})
			}()
			defer func() {
				if err := e.Shutdown(context.Background()); err != nil {
					t.Error(err)
				}
				<-done
			}()
			cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
			clients := make([]*tls.Conn, conns)
			want := map[string][]byte{}
			for i := range clients {
				c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				clients[i] = c
				if i%4 != 0 { // a quarter send nothing yet
					line := fmt.Appendf(nil, "session %d says hello\n", i)
					if _, err := c.Write(line); err != nil {
						t.Fatal(err)
					}
					want[c.LocalAddr().String()] = line
				}
			}
			received := func() int {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, b := range got {
					n += len(b)
				}
				return n
			}
			sent := 0
			for _, b := range want {
				sent += len(b)
			}
			waitCount(t, "sessions not yet sources", 0, func() int { return conns - len(e.Stats().Sources) })
			waitCount(t, "first lines not yet delivered", 0, func() int { return sent - received() })
			waitPoolIdle(t, e, fmt.Sprintf("%d idle TLS sessions", conns))
			st := e.Stats()
			held := 0
			for _, s := range st.Sources {
				held += s.Held
				if s.Runner != engine.RunnerGoroutine {
					t.Fatalf("a TLS source ran on %s", s.Runner)
				}
			}
			if held != 0 || st.Pool.InUse != 0 {
				t.Fatalf("%d idle TLS sessions hold %d buffers, %d in use", conns, held, st.Pool.InUse)
			}

			// Every session sends again, more than a buffer, and ends.
			block := bytes.Repeat([]byte("tls bulk after an idle spell\n"), 1200)
			var wg sync.WaitGroup
			for _, c := range clients {
				k := c.LocalAddr().String()
				want[k] = append(want[k], block...)
				wg.Go(func() {
					if _, err := c.Write(block); err != nil {
						t.Error(err)
					}
					c.Close()
				})
			}
			wg.Wait()
			sent += conns * len(block)
			waitCountFor(t, 60*time.Second, "bytes not yet delivered", 0, func() int { return sent - received() })
			mu.Lock()
			defer mu.Unlock()
			for k, w := range want {
				if !bytes.Equal(got[k], w) {
					t.Errorf("%s: got %d bytes, want %d", k, len(got[k]), len(w))
				}
			}
		})
	}
}

// TestTLSMQTTIdleHoldsNoBuffer subscribes over TLS through the engine: the
// session takes the goroutine runner, its messages arrive whole, and
// while the broker is quiet it holds no pool buffer.
func TestTLSMQTTIdleHoldsNoBuffer(t *testing.T) {
	ca := testca.New(t, "engine-mqtt-tls")
	srvCert := ca.Server(t, "broker")
	for _, runner := range []string{engine.RunnerURing, engine.RunnerGoroutine} {
		t.Run(runner, func(t *testing.T) {
			requireRunner(t, runner)
			srv, broker, subscribed := srcstest.StartMochiTLS(t, &tls.Config{Certificates: []tls.Certificate{srvCert.TLS}})
			col := &mqttCollector{version: 4}
			e, err := engine.New(engine.Config{Runner: runner, Buffers: 8, BufSize: 4096, Flush: time.Millisecond},
				engine.WithErrorHandler(col.handle))
			if err != nil {
				t.Fatal(err)
			}
			src, err := mqtt.NewMQTT(mqtt.MQTTConfig{Broker: broker, ClientID: "sluice-tls-" + runner,
				Topics: []string{"sensors/#"}, QoS: 1, CleanSession: true, TLS: &srcs.TLSConfig{CAFile: ca.CAFile}})
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
			publish := func(from, to int) {
				for i := from; i < to; i++ {
					if err := srv.Publish("sensors/1", fmt.Appendf(nil, "reading %d", i), false, 1); err != nil {
						t.Fatal(err)
					}
				}
				waitUntil(t, fmt.Sprintf("%d messages", to), func() bool { return col.count(t) >= to })
			}
			publish(0, 50)
			waitPoolIdle(t, e, "a quiet MQTT session over TLS")
			for _, s := range e.Stats().Sources {
				if s.Runner != engine.RunnerGoroutine || s.Held != 0 {
					t.Fatalf("the MQTT source runs on %s and holds %d buffers", s.Runner, s.Held)
				}
			}
			publish(50, 100)
			col.mu.Lock()
			defer col.mu.Unlock()
			for i, m := range col.msgs[:100] {
				if want := fmt.Sprintf("reading %d", i); string(m.Payload) != want {
					t.Fatalf("message %d is %q, want %q", i, m.Payload, want)
				}
			}
		})
	}
}
