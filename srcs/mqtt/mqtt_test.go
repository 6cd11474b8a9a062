package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/sluice-io/sluice/srcs"
	mqttsrc "github.com/sluice-io/sluice/srcs/mqtt"
)

func TestMQTTConfig(t *testing.T) {
	ok := mqttsrc.MQTTConfig{Broker: "localhost:1883", ClientID: "c", Topics: []string{"a/+/b", "#"}}
	with := func(f func(*mqttsrc.MQTTConfig)) mqttsrc.MQTTConfig {
		c := ok
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		cfg   mqttsrc.MQTTConfig
		field string // "" means valid
	}{
		{"valid", ok, ""},
		{"valid v5 qos1", with(func(c *mqttsrc.MQTTConfig) { c.Version, c.QoS = 5, 1 }), ""},
		{"anonymous clean", with(func(c *mqttsrc.MQTTConfig) { c.ClientID, c.CleanSession = "", true }), ""},
		{"v5 password only", with(func(c *mqttsrc.MQTTConfig) { c.Version, c.Password = 5, "p" }), ""},
		{"sub-second keepalive", with(func(c *mqttsrc.MQTTConfig) { c.KeepAlive = 200 * time.Millisecond }), ""},
		{"no broker", with(func(c *mqttsrc.MQTTConfig) { c.Broker = "" }), "Broker"},
		{"no port", with(func(c *mqttsrc.MQTTConfig) { c.Broker = "localhost" }), "Broker"},
		{"port zero", with(func(c *mqttsrc.MQTTConfig) { c.Broker = "localhost:0" }), "Broker"},
		{"no host", with(func(c *mqttsrc.MQTTConfig) { c.Broker = ":1883" }), "Broker"},
		{"anonymous persistent", with(func(c *mqttsrc.MQTTConfig) { c.ClientID = "" }), "ClientID"},
		{"client id NUL", with(func(c *mqttsrc.MQTTConfig) { c.ClientID = "a\x00" }), "ClientID"},
		{"no topics", with(func(c *mqttsrc.MQTTConfig) { c.Topics = nil }), "Topics"},
		{"empty topic", with(func(c *mqttsrc.MQTTConfig) { c.Topics = []string{"a", ""} }), "Topics[1]"},
		{"hash not last", with(func(c *mqttsrc.MQTTConfig) { c.Topics = []string{"a/#/b"} }), "Topics[0]"},
		{"hash in level", with(func(c *mqttsrc.MQTTConfig) { c.Topics = []string{"a/b#"} }), "Topics[0]"},
		{"plus in level", with(func(c *mqttsrc.MQTTConfig) { c.Topics = []string{"a+/b"} }), "Topics[0]"},
		{"bad utf8 topic", with(func(c *mqttsrc.MQTTConfig) { c.Topics = []string{"\xff"} }), "Topics[0]"},
		{"qos 3", with(func(c *mqttsrc.MQTTConfig) { c.QoS = 3 }), "QoS"},
		{"version 3", with(func(c *mqttsrc.MQTTConfig) { c.Version = 3 }), "Version"},
		{"negative keepalive", with(func(c *mqttsrc.MQTTConfig) { c.KeepAlive = -1 }), "KeepAlive"},
		{"huge keepalive", with(func(c *mqttsrc.MQTTConfig) { c.KeepAlive = 70000 * time.Second }), "KeepAlive"},
		{"negative dial timeout", with(func(c *mqttsrc.MQTTConfig) { c.DialTimeout = -1 }), "DialTimeout"},
		{"negative max message", with(func(c *mqttsrc.MQTTConfig) { c.MaxMessage = -1 }), "MaxMessage"},
		{"huge max message", with(func(c *mqttsrc.MQTTConfig) { c.MaxMessage = 1 << 30 }), "MaxMessage"},
		{"v3 password only", with(func(c *mqttsrc.MQTTConfig) { c.Password = "p" }), "Password"},
		{"negative backoff", with(func(c *mqttsrc.MQTTConfig) { c.Backoff.Initial = -1 }), "Backoff.Initial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := mqttsrc.NewMQTT(tt.cfg)
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

// bothWays runs f with the source read through Read (the goroutine
// runner's way) and through its descriptor (the other runners').
func bothWays(t *testing.T, f func(t *testing.T, o driveOpts)) {
	for _, o := range []driveOpts{{}, {viaDesc: true}} {
		t.Run(o.String(), func(t *testing.T) { f(t, o) })
	}
}

// TestMQTTMochi subscribes to an embedded broker, for both protocol
// versions and both QoS levels, read both ways, and checks that every
// message arrives whole and in order, framed into 16 KiB buffers; for
// QoS 1, that the broker got every PUBACK.
func TestMQTTMochi(t *testing.T) {
	for _, version := range []byte{4, 5} {
		for _, qos := range []byte{0, 1} {
			t.Run(fmt.Sprintf("v%d/qos%d", version, qos), func(t *testing.T) {
				bothWays(t, func(t *testing.T, o driveOpts) {
					srv, addr, subscribed := startMochi(t)
					id := fmt.Sprintf("sub-v%d-q%d", version, qos)
					s := subscribe(t, mqttsrc.MQTTConfig{Broker: addr, ClientID: id, Topics: []string{"data/#", "other"}, QoS: qos, Version: version, CleanSession: true}, o)
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
					s.waitMsgs(n)
					if len(s.msgs) != n {
						t.Fatalf("%d messages, want %d", len(s.msgs), n)
					}
					for i := range want {
						if s.msgs[i] != want[i] {
							t.Fatalf("message %d: topic %q, %d bytes; want topic %q, %d bytes", i, s.msgs[i].topic, len(s.msgs[i].payload), want[i].topic, len(want[i].payload))
						}
					}
					st := s.m.Stats()
					if st.Sessions != 1 || st.Subscribes != 1 || st.Messages != n {
						t.Fatalf("stats %+v", st)
					}
					if qos == 1 {
						eventually(t, 5*time.Second, "every PUBACK at the broker", func() bool {
							cl, ok := srv.Clients.Get(id)
							return ok && cl.State.Inflight.Len() == 0 && s.m.Stats().Acked == n
						})
					} else if st.Acked != 0 {
						t.Fatalf("QoS 0 acked %d", st.Acked)
					}
					if errs := s.errors(); len(errs) != 0 {
						t.Fatalf("errors: %v", errs)
					}
				})
			})
		}
	}
}

// TestMQTTOpenLeavesTheStream: Open reads the CONNACK and not a byte more,
// and returns without waiting for the SUBACK. A broker that sends its
// CONNACK, SUBACK and a message in one write loses none of them.
func TestMQTTOpenLeavesTheStream(t *testing.T) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			b := newFakeBroker(t)
			m := newMQTT(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "eager", Topics: []string{"t"}, Version: version, CleanSession: true})
			defer m.Close()
			errc := openAsync(m)
			c := b.accept()
			c.read(packets.Connect)
			ack := c.encode(connack(false, 0))
			subAck := c.encode(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: 1, ReasonCodes: []byte{0}})
			first := c.encode(pub(0, 0, "t", "first"))
			c.sendRaw(append(append(append([]byte{}, ack...), subAck...), first...))
			if err := recvErr(t, errc); err != nil {
				t.Fatal(err)
			}
			c.read(packets.Subscribe)
			want := append(append([]byte{}, subAck...), first...)
			got := make([]byte, len(want))
			if _, err := io.ReadFull(m, got); err != nil || string(got) != string(want) {
				t.Fatalf("stream after Open: %q, %v; want the SUBACK and the PUBLISH %q", got, err, want)
			}
		})
	}
}

// TestMQTTAckAfterRelease holds every chunk of 60 QoS 1 messages, checks
// that the broker hears no PUBACK, then releases the chunks one at a time
// and checks that each release acknowledges exactly the messages its
// chunk holds, in order.
func TestMQTTAckAfterRelease(t *testing.T) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			bothWays(t, func(t *testing.T, o driveOpts) {
				b := newFakeBroker(t)
				o.bufSize = 8 << 10
				s := subscribe(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "acker", Topics: []string{"t/#"}, QoS: 1, Version: version}, o)
				c := b.accept()
				connect, off := c.handshake(false, true)
				if connect.ProtocolVersion != version || connect.Connect.Clean {
					t.Fatalf("CONNECT version %d clean %v", connect.ProtocolVersion, connect.Connect.Clean)
				}

				const n = 60
				var ends []int64 // stream offset past each PUBLISH
				at := int64(off)
				for i := range n {
					at += int64(c.send(pub(1, uint16(1000+i), fmt.Sprintf("t/%d", i), payloadFor(i))))
					ends = append(ends, at)
				}
				s.hold = true
				s.waitMsgs(n)
				c.expectSilence(200*time.Millisecond, "PUBACK before release")
				if got := s.m.Stats().Acked; got != 0 {
					t.Fatalf("%d acked before release", got)
				}

				next := 0 // first message not yet acknowledged
				held := s.held
				s.held = nil
				for i, ch := range held {
					s.release(ch)
					for next < n && ends[next] <= s.through {
						pk := c.read(packets.Puback)
						if pk.PacketID != uint16(1000+next) {
							t.Fatalf("after releasing chunk %d: PUBACK %d, want %d", i, pk.PacketID, 1000+next)
						}
						next++
					}
					if s.through != int64(off) && (next == 0 || ends[next-1] != s.through) {
						t.Fatalf("chunk %d ends at %d, inside message %d", i, s.through, next)
					}
					if c.br.Buffered() != 0 {
						t.Fatalf("after releasing chunk %d: more PUBACKs than messages completed", i)
					}
				}
				if next != n {
					t.Fatalf("%d of %d acknowledged", next, n)
				}
				c.expectSilence(50*time.Millisecond, "further PUBACK")
				eventually(t, 5*time.Second, "Acked to count every PUBACK", func() bool { return s.m.Stats().Acked == n })
				if st := s.m.Stats(); st.Unacked != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		})
	}
}

// TestMQTTUnackedAcrossReconnect: a QoS 1 message still held when the
// connection drops is never acknowledged on the next connection.
func TestMQTTUnackedAcrossReconnect(t *testing.T) {
	bothWays(t, func(t *testing.T, o driveOpts) {
		b := newFakeBroker(t)
		s := subscribe(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "re", Topics: []string{"t"}, QoS: 1}, o)
		c := b.accept()
		c.handshake(false, true)
		c.send(pub(1, 7, "t", "first"))
		s.hold = true
		s.waitMsgs(1)
		c.c.Close()
		c2 := b.accept()
		c2.handshake(true, false)
		s.hold = false
		for _, ch := range s.held {
			s.release(ch)
		}
		s.held = nil
		c2.send(pub(1, 8, "t", "second"))
		s.waitMsgs(2)
		if pk := c2.read(packets.Puback); pk.PacketID != 8 {
			t.Fatalf("PUBACK %d, want 8 (7 belonged to the first connection)", pk.PacketID)
		}
		// The counter moves just after the write the broker has read.
		eventually(t, 5*time.Second, "Acked to count the PUBACK", func() bool { return s.m.Stats().Acked == 1 })
		if st := s.m.Stats(); st.Unacked != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// keepaliveCfg has a short keepalive, and a backoff long enough that a
// test sees one session.
func keepaliveCfg(addr string, ka time.Duration) mqttsrc.MQTTConfig {
	return mqttsrc.MQTTConfig{Broker: addr, ClientID: "ka", Topics: []string{"t"}, KeepAlive: ka,
		DialTimeout: 2 * time.Second, Backoff: srcs.Backoff{Initial: time.Second}}
}

// TestMQTTKeepalive: with a keepalive of a fraction of a second the client
// pings; a broker that answers keeps the session, one that does not is
// cut off with ErrTimeout, even while nobody reads the socket.
func TestMQTTKeepalive(t *testing.T) {
	const ka = 200 * time.Millisecond
	t.Run("answered", func(t *testing.T) {
		// A broker that answers within half the keepalive is never
		// late, so give a loaded machine room.
		const ka = 2 * ka
		bothWays(t, func(t *testing.T, o driveOpts) {
			b := newFakeBroker(t)
			cfg := keepaliveCfg(b.addr(), ka)
			cfg.CleanSession = true
			s := subscribe(t, cfg, o)
			c := b.accept()
			if conn, _ := c.handshake(false, true); conn.Connect.Keepalive != 1 {
				t.Fatalf("CONNECT keepalive %ds, want 1 (rounded up)", conn.Connect.Keepalive)
			}
			start := time.Now()
			pings := 0
			for time.Since(start) < 4*ka {
				c.read(packets.Pingreq)
				pings++
				c.send(pingresp)
			}
			if pings < 3 || pings > 6 {
				t.Fatalf("%d PINGREQs in %v with KeepAlive %v", pings, time.Since(start), ka)
			}
			c.send(pub(0, 0, "t", "alive"))
			s.waitMsgs(1)
			// The counter moves just after the write the broker has read,
			// and one more ping may have gone out since.
			eventually(t, 5*time.Second, "Pings to count every PINGREQ", func() bool { return s.m.Stats().Pings >= uint64(pings) })
			if st := s.m.Stats(); st.Sessions != 1 || st.Pings > uint64(pings)+1 {
				t.Fatalf("stats %+v after %d pings", st, pings)
			}
			if errs := s.errors(); len(errs) != 0 {
				t.Fatalf("errors: %v", errs)
			}
		})
	})
	t.Run("unanswered", func(t *testing.T) {
		bothWays(t, func(t *testing.T, o driveOpts) {
			b := newFakeBroker(t)
			cfg := keepaliveCfg(b.addr(), ka)
			cfg.CleanSession = true
			s := subscribe(t, cfg, o)
			c := b.accept()
			c.handshake(false, true)
			start := time.Now()
			c.read(packets.Pingreq)
			err := s.waitErr("a keepalive timeout", func(err error) bool { return errors.Is(err, srcs.ErrTimeout) })
			if el := time.Since(start); el < ka*3/2-ka/4 {
				t.Fatalf("timed out after %v, before 1.5 × %v", el, ka)
			}
			// Read returns the timeout at once; a runner reading the
			// descriptor sees the end of the stream, and Close returns it.
			op := "read: "
			if o.viaDesc {
				op = "close: "
			}
			if !strings.HasPrefix(err.Error(), op) || !strings.Contains(err.Error(), "keepalive") {
				t.Fatalf("error %v; want %sa keepalive timeout", err, op)
			}
		})
	})
	// A paused engine reads nothing: bytes the broker sent wait in the
	// socket, and the session must stay up.
	t.Run("paused", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("the kernel tells unread bytes (SIOCINQ) on Linux only")
		}
		b := newFakeBroker(t)
		m := newMQTT(t, keepaliveCfg(b.addr(), ka))
		errc := openAsync(m)
		c := b.accept()
		c.handshake(true, false)
		if err := recvErr(t, errc); err != nil {
			t.Fatal(err)
		}
		c.send(pub(0, 0, "t", "unread"))
		for range 5 {
			c.read(packets.Pingreq)
			c.send(pingresp)
		}
		c.read(packets.Pingreq) // the session is still up after 6 × KeepAlive
		if err := m.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
	})
	// Paused too, but the broker is gone without a word: the session is
	// cut (the broker sees the shutdown), and Close says why.
	t.Run("paused and silent", func(t *testing.T) {
		b := newFakeBroker(t)
		m := newMQTT(t, keepaliveCfg(b.addr(), ka))
		errc := openAsync(m)
		c := b.accept()
		c.handshake(true, false)
		if err := recvErr(t, errc); err != nil {
			t.Fatal(err)
		}
		for {
			pk, err := c.readTimeout(10 * time.Second)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("broker read %v; want the end of the stream", err)
				}
				break
			}
			if pk.FixedHeader.Type != packets.Pingreq {
				t.Fatalf("broker got %s; want PINGREQs, then the end of the stream", packets.PacketNames[pk.FixedHeader.Type])
			}
		}
		if err := m.Close(); !errors.Is(err, srcs.ErrTimeout) || !strings.Contains(err.Error(), "keepalive") {
			t.Fatalf("Close = %v; want the keepalive timeout", err)
		}
		if err := m.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
	})
}

// TestMQTTReconnectResubscribe: the broker drops the connection; the
// source is opened again, and subscribes again unless the broker resumed
// a session it asked to keep.
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
			bothWays(t, func(t *testing.T, o driveOpts) {
				b := newFakeBroker(t)
				s := subscribe(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "rs", Topics: []string{"a", "b/#"}, CleanSession: tt.clean}, o)
				c := b.accept()
				c.handshake(false, true)
				c.send(pub(0, 0, "a", "before"))
				s.waitMsgs(1)
				c.c.Close() // the broker goes away

				c2 := b.accept()
				conn, _ := c2.handshake(tt.present, tt.subscribe)
				if conn.Connect.Clean != tt.clean || conn.Connect.ClientIdentifier != "rs" {
					t.Fatalf("second CONNECT clean %v id %q", conn.Connect.Clean, conn.Connect.ClientIdentifier)
				}
				c2.send(pub(0, 0, "b/c", "after"))
				s.waitMsgs(2)
				if !tt.subscribe {
					// Open has returned (a message came through), so a
					// SUBSCRIBE would already be in the socket.
					c2.expectSilence(50*time.Millisecond, "SUBSCRIBE")
				}
				if got := s.msgs; got[0] != (msg{"a", "before"}) || got[1] != (msg{"b/c", "after"}) {
					t.Fatalf("messages %q", got)
				}
				want := uint64(1)
				if tt.subscribe {
					want = 2
				}
				if st := s.m.Stats(); st.Sessions != 2 || st.Subscribes != want {
					t.Fatalf("stats %+v, want 2 sessions and %d subscribes", st, want)
				}
				if errs := s.errors(); len(errs) != 0 {
					t.Fatalf("a clean broker close reported errors: %v", errs)
				}
			})
		})
	}
}

// TestMQTTBadPackets: whatever the broker sends that breaks the protocol
// ends the session (the framer refuses it) with ErrMalformed, or with
// ErrTooLarge for a message too large, after the messages before it.
func TestMQTTBadPackets(t *testing.T) {
	tests := []struct {
		name    string
		version byte
		bufSize int
		resumed bool // the broker resumed the session: no SUBSCRIBE
		raw     []byte
		want    func(error) bool
	}{
		{name: "reserved packet type", raw: []byte{0x00, 0x00}},
		{name: "garbage", raw: []byte("HTTP/1.1 400 Bad Request\r\n\r\n")},
		{name: "publish qos 3", raw: []byte{0x36, 0x03, 0x00, 0x01, 'a'}},
		{name: "connack mid-session", raw: []byte{0x20, 0x02, 0x00, 0x00}},
		{name: "puback to a subscriber", version: 5, raw: []byte{0x40, 0x02, 0x00, 0x01}},
		{name: "five-byte length", raw: []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{name: "topic past the end", raw: []byte{0x30, 0x03, 0x00, 0x09, 'a'}},
		{name: "topic not utf-8", raw: []byte{0x30, 0x04, 0x00, 0x02, 0xc3, 0x28}},
		{name: "qos 1 without packet id", raw: []byte{0x32, 0x05, 0x00, 0x01, 'a', 0x00, 0x00}},
		{name: "qos 2", raw: []byte{0x34, 0x05, 0x00, 0x01, 'a', 0x00, 0x01}},
		{name: "pingresp with a body", raw: []byte{0xd0, 0x01, 0x00}},
		{name: "v5 bad properties", version: 5, raw: []byte{0x30, 0x05, 0x00, 0x01, 'a', 0x02, 0xff}},
		{name: "flags on pingresp", raw: []byte{0xd1, 0x00}},
		{name: "suback nobody asked for", resumed: true, raw: []byte{0x90, 0x03, 0x00, 0x01, 0x00}},
		{name: "oversized message", raw: append([]byte{0x30, 0x83, 0x01, 0x00, 0x01, 'a'}, make([]byte, 128)...),
			want: func(err error) bool { return errors.Is(err, srcs.ErrTooLarge) }},
		{name: "message larger than a buffer", bufSize: 64, raw: append([]byte{0x30, 0x46, 0x00, 0x01, 'a'}, make([]byte, 67)...),
			want: func(err error) bool { return errors.Is(err, srcs.ErrTooLarge) && errors.Is(err, srcs.ErrRecordTooLong) }},
		{name: "broker disconnects", version: 5, raw: []byte{0xe0, 0x01, 0x8b},
			want: func(err error) bool {
				return strings.Contains(err.Error(), "broker disconnected: server shutting down (0x8b)")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bothWays(t, func(t *testing.T, o driveOpts) {
				if tt.version == 0 {
					tt.version = 4
				}
				if tt.want == nil {
					tt.want = func(err error) bool { return errors.Is(err, srcs.ErrMalformed) }
				}
				b := newFakeBroker(t)
				o.once, o.bufSize = true, tt.bufSize
				s := subscribe(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "bad", Topics: []string{"#"}, Version: tt.version, MaxMessage: 100}, o)
				c := b.accept()
				c.handshake(tt.resumed, !tt.resumed)
				good := c.encode(pub(0, 0, "ok", "fine"))
				c.sendRaw(append(good, tt.raw...))
				err := s.waitErr("the session to end", func(error) bool { return true })
				if !strings.HasPrefix(err.Error(), "read: ") || !tt.want(err) {
					t.Fatalf("session ended with %v", err)
				}
				s.pump(time.Second, "the message before the bad packet", func() bool { return len(s.msgs) > 0 })
				if len(s.msgs) != 1 || s.msgs[0] != (msg{"ok", "fine"}) {
					t.Fatalf("messages before the error: %q", s.msgs)
				}
			})
		})
	}
}

// TestMQTTRefused covers the ways a session fails to start: a broker
// refusing the CONNECT (Open fails) or a filter (the SUBACK in the stream
// ends the session), nothing listening, and a name that does not resolve.
func TestMQTTRefused(t *testing.T) {
	t.Run("connack", func(t *testing.T) {
		for _, tt := range []struct {
			version, code byte
			reason        string
		}{{4, 5, "not authorized"}, {4, 2, "identifier rejected"}, {5, 0x86, "bad user name or password"}, {5, 0x8a, "banned"}} {
			b := newFakeBroker(t)
			m := newMQTT(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}, Version: tt.version})
			errc := openAsync(m)
			c := b.accept()
			c.read(packets.Connect)
			c.send(connack(false, tt.code))
			err := recvErr(t, errc)
			var ce *mqttsrc.MQTTConnectError
			if !errors.As(err, &ce) || ce.Code != tt.code || ce.Reason != tt.reason || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("v%d code %#x: Open = %v; want an MQTTConnectError %q", tt.version, tt.code, err, tt.reason)
			}
		}
	})
	t.Run("suback", func(t *testing.T) {
		for _, version := range []byte{4, 5} {
			t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
				bothWays(t, func(t *testing.T, o driveOpts) {
					b := newFakeBroker(t)
					o.once = true
					s := subscribe(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"ok", "forbidden/#"}, QoS: 1, Version: version}, o)
					c := b.accept()
					c.read(packets.Connect)
					c.send(connack(false, 0))
					sub := c.read(packets.Subscribe)
					if len(sub.Filters) != 2 || sub.Filters[1].Filter != "forbidden/#" || sub.Filters[0].Qos != 1 {
						t.Fatalf("SUBSCRIBE filters %+v", sub.Filters)
					}
					code := byte(0x80)
					if version == 5 {
						code = 0x87
					}
					c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: sub.PacketID, ReasonCodes: []byte{1, code}})
					err := s.waitErr("the refusal", func(error) bool { return true })
					var se *mqttsrc.MQTTSubscribeError
					if !errors.As(err, &se) || se.Filter != "forbidden/#" || se.Code != code || !strings.HasPrefix(err.Error(), "read: ") {
						t.Fatalf("v%d: session ended with %v; want an MQTTSubscribeError for forbidden/#", version, err)
					}
					if st := s.m.Stats(); st.Sessions != 1 || st.Subscribes != 0 {
						t.Fatalf("stats %+v", st)
					}
				})
			})
		}
	})
	t.Run("suback for another packet", func(t *testing.T) {
		b := newFakeBroker(t)
		s := subscribe(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"a"}}, driveOpts{once: true})
		c := b.accept()
		c.handshake(false, false)
		c.read(packets.Subscribe)
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: 9, ReasonCodes: []byte{0}})
		err := s.waitErr("the bad SUBACK", func(error) bool { return true })
		var se *mqttsrc.MQTTSubscribeError
		if !errors.As(err, &se) || !errors.Is(err, srcs.ErrMalformed) {
			t.Fatalf("session ended with %v; want an MQTTSubscribeError wrapping ErrMalformed", err)
		}
	})
	t.Run("broker hangs up during connect", func(t *testing.T) {
		b := newFakeBroker(t)
		m := newMQTT(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}})
		errc := openAsync(m)
		c := b.accept()
		c.read(packets.Connect)
		c.c.Close()
		if err := recvErr(t, errc); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Open = %v; want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("broker hangs up inside the connack", func(t *testing.T) {
		b := newFakeBroker(t)
		m := newMQTT(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}})
		errc := openAsync(m)
		c := b.accept()
		c.read(packets.Connect)
		c.sendRaw([]byte{0x20, 0x02, 0x00})
		c.c.Close()
		if err := recvErr(t, errc); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Open = %v; want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("publish before connack", func(t *testing.T) {
		b := newFakeBroker(t)
		m := newMQTT(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}})
		errc := openAsync(m)
		c := b.accept()
		c.read(packets.Connect)
		c.send(pub(0, 0, "t", "early"))
		if err := recvErr(t, errc); !errors.Is(err, srcs.ErrMalformed) {
			t.Fatalf("Open = %v; want ErrMalformed", err)
		}
	})
	t.Run("silent broker", func(t *testing.T) {
		b := newFakeBroker(t)
		m := newMQTT(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "x", Topics: []string{"#"}, DialTimeout: 100 * time.Millisecond})
		errc := openAsync(m)
		b.accept()
		if err := recvErr(t, errc); !errors.Is(err, srcs.ErrTimeout) {
			t.Fatalf("Open = %v; want ErrTimeout", err)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		m := newMQTT(t, mqttsrc.MQTTConfig{Broker: addr, ClientID: "x", Topics: []string{"#"}})
		if err := m.Open(context.Background()); !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "mqtt://"+addr) {
			t.Fatalf("Open = %v; want ECONNREFUSED naming the broker", err)
		}
	})
	t.Run("dns", func(t *testing.T) {
		m := newMQTT(t, mqttsrc.MQTTConfig{Broker: "nonexistent.invalid:1883", ClientID: "x", Topics: []string{"#"}})
		err := m.Open(context.Background())
		var de *net.DNSError
		if !errors.As(err, &de) || !strings.HasPrefix(err.Error(), "srcs: mqtt mqtt://nonexistent.invalid:1883: dial: ") {
			t.Fatalf("Open = %v; want a *net.DNSError", err)
		}
	})
}

// TestMQTTCloseDisconnects: Close says goodbye with DISCONNECT, sends the
// acks already due first, and a second Close is harmless; without a
// session, Read and Desc fail with net.ErrClosed.
func TestMQTTCloseDisconnects(t *testing.T) {
	b := newFakeBroker(t)
	m := newMQTT(t, mqttsrc.MQTTConfig{Broker: b.addr(), ClientID: "bye", Topics: []string{"#"}, QoS: 1, Version: 5})
	errc := openAsync(m)
	c := b.accept()
	_, subLen := c.handshake(false, true)
	if err := recvErr(t, errc); err != nil {
		t.Fatal(err)
	}
	pubLen := c.send(pub(1, 42, "t", "x"))
	data := make([]byte, subLen+pubLen)
	if _, err := io.ReadFull(m, data); err != nil {
		t.Fatal(err)
	}
	m.Delivered(data, srcs.Records)
	m.Released(int64(len(data)))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if pk := c.read(packets.Puback); pk.PacketID != 42 {
		t.Fatalf("PUBACK %d", pk.PacketID)
	}
	c.read(packets.Disconnect)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(data); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v; want net.ErrClosed", err)
	}
	if _, err := m.Desc(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Desc after Close = %v; want net.ErrClosed", err)
	}
	if st := m.Stats(); st.Acked != 1 || st.Messages != 1 || st.Subscribes != 1 {
		t.Fatalf("stats %+v", st)
	}
}
