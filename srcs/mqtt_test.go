package srcs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

func TestMQTTConfig(t *testing.T) {
	ok := srcs.MQTTConfig{Broker: "localhost:1883", ClientID: "c", Topics: []string{"a/+/b", "#"}}
	with := func(f func(*srcs.MQTTConfig)) srcs.MQTTConfig {
		c := ok
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		cfg   srcs.MQTTConfig
		field string // "" means valid
	}{
		{"valid", ok, ""},
		{"valid v5 qos1", with(func(c *srcs.MQTTConfig) { c.Version, c.QoS = 5, 1 }), ""},
		{"anonymous clean", with(func(c *srcs.MQTTConfig) { c.ClientID, c.CleanSession = "", true }), ""},
		{"v5 password only", with(func(c *srcs.MQTTConfig) { c.Version, c.Password = 5, "p" }), ""},
		{"sub-second keepalive", with(func(c *srcs.MQTTConfig) { c.KeepAlive = 200 * time.Millisecond }), ""},
		{"no broker", with(func(c *srcs.MQTTConfig) { c.Broker = "" }), "Broker"},
		{"no port", with(func(c *srcs.MQTTConfig) { c.Broker = "localhost" }), "Broker"},
		{"port zero", with(func(c *srcs.MQTTConfig) { c.Broker = "localhost:0" }), "Broker"},
		{"no host", with(func(c *srcs.MQTTConfig) { c.Broker = ":1883" }), "Broker"},
		{"anonymous persistent", with(func(c *srcs.MQTTConfig) { c.ClientID = "" }), "ClientID"},
		{"client id NUL", with(func(c *srcs.MQTTConfig) { c.ClientID = "a\x00" }), "ClientID"},
		{"no topics", with(func(c *srcs.MQTTConfig) { c.Topics = nil }), "Topics"},
		{"empty topic", with(func(c *srcs.MQTTConfig) { c.Topics = []string{"a", ""} }), "Topics[1]"},
		{"hash not last", with(func(c *srcs.MQTTConfig) { c.Topics = []string{"a/#/b"} }), "Topics[0]"},
		{"hash in level", with(func(c *srcs.MQTTConfig) { c.Topics = []string{"a/b#"} }), "Topics[0]"},
		{"plus in level", with(func(c *srcs.MQTTConfig) { c.Topics = []string{"a+/b"} }), "Topics[0]"},
		{"bad utf8 topic", with(func(c *srcs.MQTTConfig) { c.Topics = []string{"\xff"} }), "Topics[0]"},
		{"qos 2", with(func(c *srcs.MQTTConfig) { c.QoS = 2 }), "QoS"},
		{"version 3", with(func(c *srcs.MQTTConfig) { c.Version = 3 }), "Version"},
		{"negative keepalive", with(func(c *srcs.MQTTConfig) { c.KeepAlive = -1 }), "KeepAlive"},
		{"huge keepalive", with(func(c *srcs.MQTTConfig) { c.KeepAlive = 70000 * time.Second }), "KeepAlive"},
		{"negative dial timeout", with(func(c *srcs.MQTTConfig) { c.DialTimeout = -1 }), "DialTimeout"},
		{"negative max message", with(func(c *srcs.MQTTConfig) { c.MaxMessage = -1 }), "MaxMessage"},
		{"huge max message", with(func(c *srcs.MQTTConfig) { c.MaxMessage = 1 << 30 }), "MaxMessage"},
		{"v3 password only", with(func(c *srcs.MQTTConfig) { c.Password = "p" }), "Password"},
		{"negative backoff", with(func(c *srcs.MQTTConfig) { c.Backoff.Initial = -1 }), "Backoff.Initial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := srcs.NewMQTT(tt.cfg)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("NewMQTT = %v", err)
				}
				if want := "mqtt://" + tt.cfg.Broker; m.Name() != want {
					t.Errorf("Name = %q, want %q", m.Name(), want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) || !strings.HasPrefix(err.Error(), "srcs: mqtt: ") {
				t.Fatalf("NewMQTT = %v; want an error naming %s", err, tt.field)
			}
		})
	}
}

// --- an engine pulled by the test ---

type harness struct {
	t    *testing.T
	e    *engine.Engine
	fr   srcs.FrameReader
	msgs []msg
	held []engine.Chunk
	hold bool

	mu   sync.Mutex
	errs []error
}

type msg struct{ topic, payload string }

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t}
	e, err := engine.New(engine.Config{
		Runner: engine.RunnerGoroutine, BufSize: 4096, Buffers: 256, MaxPerSource: 256, Flush: time.Millisecond,
	}, engine.WithErrorHandler(func(err error) {
		h.mu.Lock()
		h.errs = append(h.errs, err)
		h.mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	t.Cleanup(h.shutdown)
	return h
}

func (h *harness) add(src srcs.Source) {
	h.t.Helper()
	if _, err := h.e.AddSource(src); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) shutdown() {
	for i := range h.held {
		h.held[i].Release()
	}
	h.held = nil
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := h.e.Next(ctx)
			if err != nil {
				return
			}
			c.Release()
		}
	}()
	if err := h.e.Shutdown(ctx); err != nil {
		h.t.Errorf("engine shutdown: %v", err)
	}
	<-done
}

func (h *harness) errors() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// pump takes chunks (and with them, errors) until done holds, failing the
// test after timeout. Data goes through the FrameReader into h.msgs;
// chunks are released, or kept in h.held if h.hold is set.
func (h *harness) pump(timeout time.Duration, what string, done func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; %d messages, errors %v", what, len(h.msgs), h.errors())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		c, err := h.e.Next(ctx)
		cancel()
		if err != nil {
			continue
		}
		h.fr.Write(c.Data)
		for {
			m, ok, err := h.fr.Next()
			if err != nil {
				h.t.Fatal(err)
			}
			if !ok {
				break
			}
			h.msgs = append(h.msgs, msg{string(m.Topic), string(m.Payload)})
		}
		if h.hold && c.Data != nil {
			h.held = append(h.held, c)
		} else {
			c.Release()
		}
	}
}

func (h *harness) waitMsgs(n int) {
	h.t.Helper()
	h.pump(10*time.Second, fmt.Sprintf("%d messages", n), func() bool { return len(h.msgs) >= n })
}

func (h *harness) waitErr(what string, match func(error) bool) error {
	h.t.Helper()
	var found error
	h.pump(10*time.Second, what, func() bool {
		for _, err := range h.errors() {
			if match(err) {
				found = err
				return true
			}
		}
		return false
	})
	return found
}

// eventually polls cond: for counters of an external broker, where there
// is nothing to wait on.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func newMQTT(t *testing.T, cfg srcs.MQTTConfig) *srcs.MQTT {
	t.Helper()
	m, err := srcs.NewMQTT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// payloadFor makes message i's payload: sizes vary from 0 to about 6 KiB,
// so frames straddle 4 KiB chunks.
func payloadFor(i int) string {
	n := (i * 997) % 6000
	return fmt.Sprintf("%05d:", i) + strings.Repeat(string(rune('a'+i%26)), n)
}

// --- the embedded mochi broker ---

type subHook struct {
	mqtt.HookBase
	subscribed chan string
}

func (h *subHook) ID() string           { return "test-subscribed" }
func (h *subHook) Provides(b byte) bool { return b == mqtt.OnSubscribed }
func (h *subHook) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	select {
	case h.subscribed <- cl.ID:
	default:
	}
}

// startMochi runs a mochi broker on a free loopback port, with an inline
// client for publishing, until the test ends.
func startMochi(t *testing.T) (*mqtt.Server, string, <-chan string) {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	hook := &subHook{subscribed: make(chan string, 16)}
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
	t.Cleanup(func() { srv.Close() })
	return srv, l.Address(), hook.subscribed
}

func waitSubscribed(t *testing.T, ch <-chan string, id string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case got := <-ch:
			if got == id {
				return
			}
		case <-timer.C:
			t.Fatalf("client %q never subscribed", id)
		}
	}
}

// TestMQTTEngineMochi subscribes through the engine to an embedded broker,
// for both protocol versions and both QoS levels, and checks that every
// message arrives whole and in order, reassembled from 4 KiB chunks; for
// QoS 1, that the broker got every PUBACK.
func TestMQTTEngineMochi(t *testing.T) {
	for _, version := range []byte{4, 5} {
		for _, qos := range []byte{0, 1} {
			t.Run(fmt.Sprintf("v%d/qos%d", version, qos), func(t *testing.T) {
				srv, addr, subscribed := startMochi(t)
				h := newHarness(t)
				id := fmt.Sprintf("sub-v%d-q%d", version, qos)
				sub := newMQTT(t, srcs.MQTTConfig{Broker: addr, ClientID: id, Topics: []string{"data/#", "other"}, QoS: qos, Version: version, CleanSession: true})
				h.add(sub)
				waitSubscribed(t, subscribed, id)

				const n = 200
				var want []msg
				for i := range n {
					topic := fmt.Sprintf("data/%d", i%7)
					if i%10 == 9 {
						topic = "other"
					}
					want = append(want, msg{topic, payloadFor(i)})
					if err := srv.Publish(topic, []byte(want[i].payload), false, qos); err != nil {
						t.Fatal(err)
					}
					if i%50 == 0 {
						srv.Publish("ignored/topic", []byte("x"), false, qos)
					}
				}
				h.waitMsgs(n)
				if len(h.msgs) != n {
					t.Fatalf("%d messages, want %d", len(h.msgs), n)
				}
				for i := range want {
					if h.msgs[i] != want[i] {
						t.Fatalf("message %d: topic %q, %d bytes; want topic %q, %d bytes", i, h.msgs[i].topic, len(h.msgs[i].payload), want[i].topic, len(want[i].payload))
					}
				}
				st := sub.Stats()
				if st.Sessions != 1 || st.Subscribes != 1 || st.Messages != n {
					t.Fatalf("stats %+v", st)
				}
				if qos == 1 {
					eventually(t, 5*time.Second, "every PUBACK at the broker", func() bool {
						cl, ok := srv.Clients.Get(id)
						return ok && cl.State.Inflight.Len() == 0 && sub.Stats().Acked == n
					})
				} else if st.Acked != 0 {
					t.Fatalf("QoS 0 acked %d", st.Acked)
				}
				if errs := h.errors(); len(errs) != 0 {
					t.Fatalf("errors: %v", errs)
				}
			})
		}
	}
}

// --- a fake broker speaking through mochi's codec ---

type fakeBroker struct {
	t     *testing.T
	ln    net.Listener
	conns chan net.Conn
	wg    sync.WaitGroup
}

func newFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, conns: make(chan net.Conn, 16)}
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case b.conns <- c:
			default:
				c.Close()
			}
		}
	})
	t.Cleanup(func() {
		ln.Close()
		b.wg.Wait()
		for {
			select {
			case c := <-b.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return b
}

func (b *fakeBroker) addr() string { return b.ln.Addr().String() }

type fakeConn struct {
	t       *testing.T
	c       net.Conn
	br      *bufio.Reader
	version byte
}

func (b *fakeBroker) accept() *fakeConn {
	b.t.Helper()
	select {
	case c := <-b.conns:
		b.t.Cleanup(func() { c.Close() })
		return &fakeConn{t: b.t, c: c, br: bufio.NewReader(c), version: 4}
	case <-time.After(10 * time.Second):
		b.t.Fatal("no connection to the fake broker")
	}
	return nil
}

// readTimeout reads one packet from the client.
func (c *fakeConn) readTimeout(d time.Duration) (packets.Packet, error) {
	c.c.SetReadDeadline(time.Now().Add(d))
	var pk packets.Packet
	hb, err := c.br.ReadByte()
	if err != nil {
		return pk, err
	}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		return pk, err
	}
	n, _, err := packets.DecodeLength(c.br)
	if err != nil {
		return pk, err
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(c.br, body); err != nil {
		return pk, err
	}
	pk.ProtocolVersion = c.version
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectDecode(body)
		c.version = pk.ProtocolVersion
	case packets.Subscribe:
		err = pk.SubscribeDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	case packets.Pingreq:
	default:
		err = fmt.Errorf("fake broker: unexpected packet type %d", pk.FixedHeader.Type)
	}
	return pk, err
}

func (c *fakeConn) read(want byte) packets.Packet {
	c.t.Helper()
	pk, err := c.readTimeout(10 * time.Second)
	if err != nil {
		c.t.Fatalf("fake broker: reading %s: %v", packets.PacketNames[want], err)
	}
	if pk.FixedHeader.Type != want {
		c.t.Fatalf("fake broker: got %s, want %s", packets.PacketNames[pk.FixedHeader.Type], packets.PacketNames[want])
	}
	return pk
}

func (c *fakeConn) send(pk packets.Packet) {
	c.t.Helper()
	pk.ProtocolVersion = c.version
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackEncode(&b)
	case packets.Suback:
		err = pk.SubackEncode(&b)
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Pingresp:
		err = pk.PingrespEncode(&b)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&b)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(b.Bytes())
}

func (c *fakeConn) sendRaw(p []byte) {
	c.t.Helper()
	c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.c.Write(p); err != nil {
		c.t.Fatalf("fake broker: write: %v", err)
	}
}

func connack(present bool, code byte) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, SessionPresent: present, ReasonCode: code}
}

func pub(qos byte, id uint16, topic, payload string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, PacketID: id, TopicName: topic, Payload: []byte(payload)}
}

// handshake accepts the CONNECT, answers it, and if subscribe is set
// expects a SUBSCRIBE and grants it. It returns the CONNECT.
func (c *fakeConn) handshake(present, subscribe bool) packets.Packet {
	c.t.Helper()
	conn := c.read(packets.Connect)
	c.send(connack(present, 0))
	if subscribe {
		sub := c.read(packets.Subscribe)
		codes := make([]byte, len(sub.Filters))
		for i, f := range sub.Filters {
			codes[i] = f.Qos
		}
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: sub.PacketID, ReasonCodes: codes})
	}
	return conn
}

// expectSilence checks the client sends nothing for d.
func (c *fakeConn) expectSilence(d time.Duration, what string) {
	c.t.Helper()
	pk, err := c.readTimeout(d)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.t.Fatalf("fake broker: got %s (%v) while expecting no %s", packets.PacketNames[pk.FixedHeader.Type], err, what)
	}
	c.br.Reset(c.c) // forget the failed read
}

// openAsync runs Open while the test plays the broker.
func openAsync(m *srcs.MQTT) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- m.Open(context.Background()) }()
	return errc
}

func recvErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Open did not return")
	}
	return nil
}

// TestMQTTAckAfterRelease holds every chunk of 60 QoS 1 messages, checks
// that the broker hears no PUBACK, then releases the chunks one at a time
// and checks that each release acknowledges exactly the messages whose
// frames it completed, in order.
func TestMQTTAckAfterRelease(t *testing.T) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			b := newFakeBroker(t)
			h := newHarness(t)
			sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "acker", Topics: []string{"t/#"}, QoS: 1, Version: version})
			h.add(sub)
			c := b.accept()
			connect := c.handshake(false, true)
			if connect.ProtocolVersion != version || connect.Connect.Clean {
				t.Fatalf("CONNECT version %d clean %v", connect.ProtocolVersion, connect.Connect.Clean)
			}

			const n = 60
			var ends []int64 // stream offset past each frame
			var off int64
			for i := range n {
				topic := fmt.Sprintf("t/%d", i)
				c.send(pub(1, uint16(1000+i), topic, payloadFor(i)))
				off += int64(len(srcs.AppendMQTTFrame(nil, topic, []byte(payloadFor(i)))))
				ends = append(ends, off)
			}
			h.hold = true
			h.waitMsgs(n)
			c.expectSilence(200*time.Millisecond, "PUBACK before release")
			if got := sub.Stats().Acked; got != 0 {
				t.Fatalf("%d acked before release", got)
			}

			next := 0 // first message not yet acknowledged
			var through int64
			for i := range h.held { // released in place: a failure leaves the rest to cleanup
				through += int64(len(h.held[i].Data))
				h.held[i].Release()
				for next < n && ends[next] <= through {
					pk := c.read(packets.Puback)
					if pk.PacketID != uint16(1000+next) {
						t.Fatalf("after releasing chunk %d: PUBACK %d, want %d", i, pk.PacketID, 1000+next)
					}
					next++
				}
				if c.br.Buffered() != 0 {
					t.Fatalf("after releasing chunk %d: more PUBACKs than messages completed", i)
				}
			}
			if next != n {
				t.Fatalf("%d of %d acknowledged", next, n)
			}
			c.expectSilence(50*time.Millisecond, "further PUBACK")
			eventually(t, 5*time.Second, "Acked to count every PUBACK", func() bool { return sub.Stats().Acked == n })
			if st := sub.Stats(); st.Unacked != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestMQTTUnackedAcrossReconnect: a QoS 1 message still held when the
// connection drops is never acknowledged on the next connection.
func TestMQTTUnackedAcrossReconnect(t *testing.T) {
	b := newFakeBroker(t)
	h := newHarness(t)
	sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "re", Topics: []string{"t"}, QoS: 1,
		Backoff: srcs.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	h.add(sub)
	c := b.accept()
	c.handshake(false, true)
	c.send(pub(1, 7, "t", "first"))
	h.hold = true
	h.waitMsgs(1)
	c.c.Close()
	c2 := b.accept()
	c2.handshake(true, false)
	h.hold = false
	for i := range h.held {
		h.held[i].Release()
	}
	c2.send(pub(1, 8, "t", "second"))
	h.waitMsgs(2)
	if pk := c2.read(packets.Puback); pk.PacketID != 8 {
		t.Fatalf("PUBACK %d, want 8 (7 belonged to the first connection)", pk.PacketID)
	}
	// The counter moves just after the write the broker has read.
	eventually(t, 5*time.Second, "Acked to count the PUBACK", func() bool { return sub.Stats().Acked == 1 })
	if st := sub.Stats(); st.Unacked != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMQTTKeepalive: with KeepAlive 200ms the client pings; a broker that
// answers keeps the session, one that does not is cut off with ErrTimeout.
func TestMQTTKeepalive(t *testing.T) {
	const ka = 200 * time.Millisecond
	cfg := func(addr string) srcs.MQTTConfig {
		return srcs.MQTTConfig{Broker: addr, ClientID: "ka", Topics: []string{"t"}, KeepAlive: ka, CleanSession: true,
			DialTimeout: 2 * time.Second, Backoff: srcs.Backoff{Initial: time.Second}}
	}
	t.Run("answered", func(t *testing.T) {
		b := newFakeBroker(t)
		h := newHarness(t)
		sub := newMQTT(t, cfg(b.addr()))
		h.add(sub)
		c := b.accept()
		if conn := c.handshake(false, true); conn.Connect.Keepalive != 1 {
			t.Fatalf("CONNECT keepalive %ds, want 1 (rounded up)", conn.Connect.Keepalive)
		}
		start := time.Now()
		pings := 0
		for time.Since(start) < 4*ka {
			c.read(packets.Pingreq)
			pings++
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}})
		}
		if pings < 3 || pings > 6 {
			t.Fatalf("%d PINGREQs in %v with KeepAlive %v", pings, time.Since(start), ka)
		}
		c.send(pub(0, 0, "t", "alive"))
		h.waitMsgs(1)
		// The counter moves just after the write the broker has read, and
		// one more ping may have gone out since.
		eventually(t, 5*time.Second, "Pings to count every PINGREQ", func() bool { return sub.Stats().Pings >= uint64(pings) })
		if st := sub.Stats(); st.Sessions != 1 || st.Pings > uint64(pings)+1 {
			t.Fatalf("stats %+v after %d pings", st, pings)
		}
		if errs := h.errors(); len(errs) != 0 {
			t.Fatalf("errors: %v", errs)
		}
	})
	t.Run("unanswered", func(t *testing.T) {
		b := newFakeBroker(t)
		h := newHarness(t)
		h.add(newMQTT(t, cfg(b.addr())))
		c := b.accept()
		c.handshake(false, true)
		start := time.Now()
		c.read(packets.Pingreq)
		err := h.waitErr("a keepalive timeout", func(err error) bool { return errors.Is(err, srcs.ErrTimeout) })
		if el := time.Since(start); el < ka*3/2-ka/4 {
			t.Fatalf("timed out after %v, before 1.5 × %v", el, ka)
		}
		var se *srcs.SourceError
		if !errors.As(err, &se) || se.Op != "read" || !strings.Contains(err.Error(), "keepalive") {
			t.Fatalf("error %v; want a read SourceError about the keepalive", err)
		}
	})
}

// TestMQTTReconnectResubscribe: the broker drops the connection; the
// engine reconnects, and the source subscribes again unless the broker
// resumed a session it asked to keep.
func TestMQTTReconnectResubscribe(t *testing.T) {
	tests := []struct {
		name      string
		clean     bool
		present   bool // the second CONNACK's session-present flag
		subscribe bool // whether the second connection must subscribe
	}{
		{"clean session", true, false, true},
		{"persistent, session resumed", false, true, false},
		{"persistent, session lost", false, false, true},
		{"clean session, broker claims a session", true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeBroker(t)
			h := newHarness(t)
			sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "rs", Topics: []string{"a", "b/#"}, CleanSession: tt.clean,
				Backoff: srcs.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
			h.add(sub)
			c := b.accept()
			c.handshake(false, true)
			c.send(pub(0, 0, "a", "before"))
			h.waitMsgs(1)
			c.c.Close() // the broker goes away

			c2 := b.accept()
			conn := c2.handshake(tt.present, tt.subscribe)
			if conn.Connect.Clean != tt.clean || conn.Connect.ClientIdentifier != "rs" {
				t.Fatalf("second CONNECT clean %v id %q", conn.Connect.Clean, conn.Connect.ClientIdentifier)
			}
			c2.send(pub(0, 0, "b/c", "after"))
			h.waitMsgs(2)
			if !tt.subscribe {
				// Open has returned (a message came through Read), so a
				// SUBSCRIBE would already be in the socket.
				c2.expectSilence(50*time.Millisecond, "SUBSCRIBE")
			}
			if got := h.msgs; got[0] != (msg{"a", "before"}) || got[1] != (msg{"b/c", "after"}) {
				t.Fatalf("messages %q", got)
			}
			want := uint64(1)
			if tt.subscribe {
				want = 2
			}
			if st := sub.Stats(); st.Sessions != 2 || st.Subscribes != want {
				t.Fatalf("stats %+v, want 2 sessions and %d subscribes", st, want)
			}
			if errs := h.errors(); len(errs) != 0 {
				t.Fatalf("a clean broker close reported errors: %v", errs)
			}
		})
	}
}

// TestMQTTBadPackets: whatever the broker sends that breaks the protocol
// ends the session with ErrMalformed (or ErrTooLarge), after the data
// read before it.
func TestMQTTBadPackets(t *testing.T) {
	good := func(v byte) []byte {
		var b bytes.Buffer
		pk := pub(0, 0, "ok", "fine")
		pk.ProtocolVersion = v
		pk.PublishEncode(&b)
		return b.Bytes()
	}
	tests := []struct {
		name    string
		version byte
		raw     []byte
		want    error
	}{
		{"reserved packet type", 4, []byte{0x00, 0x00}, srcs.ErrMalformed},
		{"publish qos 3", 4, []byte{0x36, 0x03, 0x00, 0x01, 'a'}, srcs.ErrMalformed},
		{"connack mid-session", 4, []byte{0x20, 0x02, 0x00, 0x00}, srcs.ErrMalformed},
		{"puback to a subscriber", 5, []byte{0x40, 0x02, 0x00, 0x01}, srcs.ErrMalformed},
		{"five-byte length", 4, []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f}, srcs.ErrMalformed},
		{"topic past the end", 4, []byte{0x30, 0x03, 0x00, 0x09, 'a'}, srcs.ErrMalformed},
		{"topic not utf-8", 4, []byte{0x30, 0x04, 0x00, 0x02, 0xc3, 0x28}, srcs.ErrMalformed},
		{"qos 1 without packet id", 4, []byte{0x32, 0x05, 0x00, 0x01, 'a', 0x00, 0x00}, srcs.ErrMalformed},
		{"qos 2", 4, []byte{0x34, 0x05, 0x00, 0x01, 'a', 0x00, 0x01}, srcs.ErrMalformed},
		{"pingresp with a body", 4, []byte{0xd0, 0x01, 0x00}, srcs.ErrMalformed},
		{"v5 bad properties", 5, []byte{0x30, 0x05, 0x00, 0x01, 'a', 0x02, 0xff}, srcs.ErrMalformed},
		{"flags on pingresp", 4, []byte{0xd1, 0x00}, srcs.ErrMalformed},
		{"oversized message", 4, append([]byte{0x30, 0x83, 0x01, 0x00, 0x01, 'a'}, make([]byte, 128)...), srcs.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeBroker(t)
			sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), Topics: []string{"#"}, CleanSession: true, Version: tt.version, MaxMessage: 100})
			defer sub.Close()
			errc := openAsync(sub)
			c := b.accept()
			c.handshake(false, true)
			if err := recvErr(t, errc); err != nil {
				t.Fatal(err)
			}
			c.sendRaw(append(good(tt.version), tt.raw...))
			buf := make([]byte, 4096)
			var data []byte
			var err error
			for err == nil {
				var n int
				n, err = sub.Read(buf)
				data = append(data, buf[:n]...)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Read error %v; want %v", err, tt.want)
			}
			if !bytes.Equal(data, srcs.AppendMQTTFrame(nil, "ok", []byte("fine"))) {
				t.Fatalf("data before the error: %q", data)
			}
		})
	}
}

// TestMQTTRefused covers the ways Open fails: a broker refusing the
// CONNECT or a filter, nothing listening, and a name that does not
// resolve.
func TestMQTTRefused(t *testing.T) {
	t.Run("connack", func(t *testing.T) {
		for _, tt := range []struct {
			version, code byte
			reason        string
		}{{4, 5, "not authorized"}, {4, 2, "identifier rejected"}, {5, 0x86, "bad user name or password"}, {5, 0x8a, "banned"}} {
			b := newFakeBroker(t)
			sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}, Version: tt.version})
			errc := openAsync(sub)
			c := b.accept()
			c.read(packets.Connect)
			c.send(connack(false, tt.code))
			err := recvErr(t, errc)
			var ce *srcs.MQTTConnectError
			if !errors.As(err, &ce) || ce.Code != tt.code || ce.Reason != tt.reason || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("v%d code %#x: Open = %v; want an MQTTConnectError %q", tt.version, tt.code, err, tt.reason)
			}
		}
	})
	t.Run("suback", func(t *testing.T) {
		for _, version := range []byte{4, 5} {
			b := newFakeBroker(t)
			sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"ok", "forbidden/#"}, QoS: 1, Version: version})
			errc := openAsync(sub)
			c := b.accept()
			c.read(packets.Connect)
			c.send(connack(false, 0))
			s := c.read(packets.Subscribe)
			if len(s.Filters) != 2 || s.Filters[1].Filter != "forbidden/#" || s.Filters[0].Qos != 1 {
				t.Fatalf("SUBSCRIBE filters %+v", s.Filters)
			}
			code := byte(0x80)
			if version == 5 {
				code = 0x87
			}
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: s.PacketID, ReasonCodes: []byte{1, code}})
			err := recvErr(t, errc)
			var se *srcs.MQTTSubscribeError
			if !errors.As(err, &se) || se.Filter != "forbidden/#" || se.Code != code {
				t.Fatalf("v%d: Open = %v; want an MQTTSubscribeError for forbidden/#", version, err)
			}
		}
	})
	t.Run("broker hangs up during connect", func(t *testing.T) {
		b := newFakeBroker(t)
		sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}})
		errc := openAsync(sub)
		c := b.accept()
		c.read(packets.Connect)
		c.c.Close()
		if err := recvErr(t, errc); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Open = %v; want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("silent broker", func(t *testing.T) {
		b := newFakeBroker(t)
		sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}, DialTimeout: 100 * time.Millisecond})
		errc := openAsync(sub)
		b.accept()
		if err := recvErr(t, errc); !errors.Is(err, srcs.ErrTimeout) {
			t.Fatalf("Open = %v; want ErrTimeout", err)
		}
	})
	t.Run("connection refused through the engine", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		h := newHarness(t)
		h.add(newMQTT(t, srcs.MQTTConfig{Broker: addr, ClientID: "x", Topics: []string{"#"}, Backoff: srcs.Backoff{Initial: time.Millisecond, Attempts: 2}}))
		err = h.waitErr("connection refused", func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) })
		var se *srcs.SourceError
		if !errors.As(err, &se) || se.Op != "open" || se.Name != "mqtt://"+addr {
			t.Fatalf("error %v; want an open SourceError naming the broker", err)
		}
	})
	t.Run("dns", func(t *testing.T) {
		sub := newMQTT(t, srcs.MQTTConfig{Broker: "nonexistent.invalid:1883", ClientID: "x", Topics: []string{"#"}})
		err := sub.Open(context.Background())
		var de *net.DNSError
		if !errors.As(err, &de) || !strings.HasPrefix(err.Error(), "srcs: mqtt mqtt://nonexistent.invalid:1883: dial: ") {
			t.Fatalf("Open = %v; want a *net.DNSError", err)
		}
	})
}

// TestMQTTCloseDisconnects: Close says goodbye with DISCONNECT, sends the
// acks already due first, and a second Close is harmless.
func TestMQTTCloseDisconnects(t *testing.T) {
	b := newFakeBroker(t)
	sub := newMQTT(t, srcs.MQTTConfig{Broker: b.addr(), ClientID: "bye", Topics: []string{"#"}, QoS: 1, Version: 5})
	errc := openAsync(sub)
	c := b.accept()
	c.handshake(false, true)
	if err := recvErr(t, errc); err != nil {
		t.Fatal(err)
	}
	c.send(pub(1, 42, "t", "x"))
	buf := make([]byte, 64)
	n, err := sub.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	sub.Released(int64(n))
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if pk := c.read(packets.Puback); pk.PacketID != 42 {
		t.Fatalf("PUBACK %d", pk.PacketID)
	}
	c.read(packets.Disconnect)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v; want net.ErrClosed", err)
	}
}
