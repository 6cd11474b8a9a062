package mqtt

// Internal tests of the MQTT subscriber's packets: the framer's checks,
// ForEachMQTTMessage, and Delivered's bookkeeping, on packets built with
// mochi's codec and without a broker.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/sluice-io/sluice/srcs"
)

// testMQTT returns a source that has not connected, for framing tests.
func testMQTT(t testing.TB, version, qos byte, maxMsg int, topics ...string) *MQTT {
	t.Helper()
	if len(topics) == 0 {
		topics = []string{"#"}
	}
	m, err := NewMQTT(MQTTConfig{Broker: "localhost:1883", Topics: topics, CleanSession: true, Version: version, QoS: qos, MaxMessage: maxMsg})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// encode encodes a packet a broker sends a subscriber.
func encode(t testing.TB, pk packets.Packet) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Pingresp:
		err = pk.PingrespEncode(&b)
	case packets.Suback:
		err = pk.SubackEncode(&b)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&b)
	case packets.Connack:
		err = pk.ConnackEncode(&b)
	case packets.Puback:
		err = pk.PubackEncode(&b)
	default:
		t.Fatalf("encode: type %d", pk.FixedHeader.Type)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func publish(version, qos byte, id uint16, topic, payload string) packets.Packet {
	return packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: qos},
		ProtocolVersion: version, PacketID: id, TopicName: topic, Payload: []byte(payload),
	}
}

// withProps gives a v5 PUBLISH one property of every kind a broker may
// send with it.
func withProps(pk packets.Packet) packets.Packet {
	pk.Properties = packets.Properties{
		PayloadFormat: 1, PayloadFormatFlag: true, MessageExpiryInterval: 60,
		ContentType: "text/plain", ResponseTopic: "re/ply", CorrelationData: []byte{0, 1, 2},
		SubscriptionIdentifier: []int{300}, User: []packets.UserProperty{{Key: "k", Val: "v"}, {Key: "ü", Val: ""}},
	}
	return pk
}

func suback(version byte, id uint16, codes ...byte) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ProtocolVersion: version, PacketID: id, ReasonCodes: codes}
}

var pingresp = packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}

// TestMQTTFramerChecks feeds single packets to a source's framer: good
// ones frame whole (and every prefix of them waits for more), bad ones
// fail as the source documents.
func TestMQTTFramerChecks(t *testing.T) {
	isMalformed := func(err error) bool { return errors.Is(err, srcs.ErrMalformed) }
	isTooLarge := func(err error) bool { return errors.Is(err, srcs.ErrTooLarge) && errors.Is(err, srcs.ErrRecordTooLong) }
	refused := func(filter string, code byte) func(error) bool {
		return func(err error) bool {
			var se *MQTTSubscribeError
			return errors.As(err, &se) && se.Filter == filter && se.Code == code && se.Err == nil
		}
	}
	badSuback := func(err error) bool {
		var se *MQTTSubscribeError
		return errors.As(err, &se) && se.Filter == "" && errors.Is(err, srcs.ErrMalformed)
	}
	says := func(s string) func(error) bool {
		return func(err error) bool { return err != nil && strings.Contains(err.Error(), s) }
	}
	discReason := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: 5, ReasonCode: 0x8B}
	discReason.Properties.ReasonString = "maintenance"
	refusedV5 := suback(5, 1, 0, 0x87)
	refusedV5.Properties.ReasonString = "acl"

	tests := []struct {
		name    string
		version byte
		noSub   bool // the session sent no SUBSCRIBE
		pkt     []byte
		want    func(error) bool // nil: the packet is good
	}{
		{"publish qos0", 4, false, encode(t, publish(4, 0, 0, "a/b", "hello")), nil},
		{"publish qos1", 4, false, encode(t, publish(4, 1, 7, "a", "x")), nil},
		{"publish empty payload", 4, false, encode(t, publish(4, 0, 0, "a", "")), nil},
		{"publish retained dup", 4, false, []byte{0x3b, 0x06, 0x00, 0x01, 'a', 0x00, 0x09, 'p'}, nil},
		{"publish v5 properties", 5, false, encode(t, withProps(publish(5, 1, 3, "a/b", "hello"))), nil},
		{"publish v5 no properties", 5, false, encode(t, publish(5, 0, 0, "t", "p")), nil},
		{"publish at MaxMessage", 4, false, encode(t, publish(4, 0, 0, "t", strings.Repeat("x", 100))), nil},
		{"pingresp", 4, false, encode(t, pingresp), nil},
		{"suback v4", 4, false, encode(t, suback(4, 1, 0, 1)), nil},
		{"suback v5", 5, false, encode(t, suback(5, 1, 1, 0)), nil},
		{"disconnect v5 normal", 5, false, []byte{0xe0, 0x00}, nil},
		{"disconnect v5 normal with properties", 5, false, []byte{0xe0, 0x02, 0x00, 0x00}, nil},
		{"disconnect v4", 4, false, []byte{0xe0, 0x00}, nil},

		{"publish qos2", 4, false, encode(t, publish(4, 2, 1, "a", "x")), isMalformed},
		{"publish qos3", 4, false, []byte{0x36, 0x05, 0x00, 0x01, 'a', 0x00, 0x01}, isMalformed},
		{"publish qos1 id 0", 4, false, []byte{0x32, 0x05, 0x00, 0x01, 'a', 0x00, 0x00}, isMalformed},
		{"publish qos1 no id", 4, false, []byte{0x32, 0x04, 0x00, 0x01, 'a', 'b'}, isMalformed},
		{"publish topic past the end", 4, false, []byte{0x30, 0x03, 0x00, 0x09, 'a'}, isMalformed},
		{"publish topic not utf-8", 4, false, []byte{0x30, 0x04, 0x00, 0x02, 0xc3, 0x28}, isMalformed},
		{"publish topic with NUL", 4, false, []byte{0x30, 0x04, 0x00, 0x02, 'a', 0x00}, isMalformed},
		{"publish empty topic (alias)", 5, false, []byte{0x30, 0x06, 0x00, 0x00, 0x03, 0x23, 0x00, 0x01}, isMalformed},
		{"publish v5 properties past the end", 5, false, []byte{0x30, 0x05, 0x00, 0x01, 'a', 0x02, 0xff}, isMalformed},
		{"publish v5 property not for publish", 5, false, []byte{0x30, 0x09, 0x00, 0x01, 'a', 0x05, 0x11, 0, 0, 0, 1}, isMalformed},
		{"publish v5 unknown property", 5, false, []byte{0x30, 0x06, 0x00, 0x01, 'a', 0x02, 0x7f, 0x00}, isMalformed},
		{"publish v5 property string not utf-8", 5, false, []byte{0x30, 0x09, 0x00, 0x01, 'a', 0x05, 0x03, 0x00, 0x02, 0xc3, 0x28}, isMalformed},
		{"publish above MaxMessage", 4, false, encode(t, publish(4, 0, 0, "t", strings.Repeat("x", 101))), isTooLarge},
		{"publish above a buffer", 4, false, encode(t, publish(4, 0, 0, "t", strings.Repeat("x", 80))), nil},
		{"pingresp with a body", 4, false, []byte{0xd0, 0x01, 0x00}, isMalformed},
		{"pingresp flags", 4, false, []byte{0xd1, 0x00}, isMalformed},
		{"suback flags", 4, false, []byte{0x92, 0x03, 0x00, 0x01, 0x00}, isMalformed},
		{"suback without subscribe", 4, true, encode(t, suback(4, 1, 0, 0)), isMalformed},
		{"suback wrong id", 4, false, encode(t, suback(4, 2, 0, 0)), badSuback},
		{"suback wrong count", 5, false, encode(t, suback(5, 1, 0)), badSuback},
		{"suback no id", 4, false, []byte{0x90, 0x01, 0x00}, badSuback},
		{"suback refused v4", 4, false, encode(t, suback(4, 1, 1, 0x80)), refused("b/#", 0x80)},
		{"suback refused v5", 5, false, encode(t, refusedV5), func(err error) bool {
			return refused("b/#", 0x87)(err) && strings.Contains(err.Error(), "not authorized: acl")
		}},
		{"disconnect v5 reason", 5, false, encode(t, discReason), says("broker disconnected: server shutting down (0x8b): maintenance")},
		{"disconnect v4 body", 4, false, []byte{0xe0, 0x01, 0x00}, isMalformed},
		{"disconnect flags", 5, false, []byte{0xe1, 0x00}, isMalformed},
		{"connack", 4, false, []byte{0x20, 0x02, 0x00, 0x00}, isMalformed},
		{"puback", 5, false, []byte{0x40, 0x02, 0x00, 0x01}, isMalformed},
		{"pubrel", 4, false, []byte{0x62, 0x02, 0x00, 0x01}, isMalformed},
		{"unsuback", 4, false, []byte{0xb0, 0x02, 0x00, 0x01}, isMalformed},
		{"auth", 5, false, []byte{0xf0, 0x00}, isMalformed},
		{"subscribe", 4, false, []byte{0x82, 0x02, 0x00, 0x01}, isMalformed},
		{"reserved type", 4, false, []byte{0x00, 0x00}, isMalformed},
		{"five-byte length", 4, false, []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f}, isMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testMQTT(t, tt.version, 1, 100, "a", "b/#")
			m.subSent.Store(!tt.noSub)
			f := m.Framer()
			n, err := f.Next(tt.pkt, 0, 4096)
			if tt.want != nil {
				if n != 0 || !tt.want(err) {
					t.Fatalf("Next = %d, %v; want the packet refused", n, err)
				}
				return
			}
			if err != nil || n != len(tt.pkt) {
				t.Fatalf("Next = %d, %v; want %d, nil", n, err, len(tt.pkt))
			}
			for i := range len(tt.pkt) {
				if n, err := f.Next(tt.pkt[:i], 0, 4096); n != 0 || err != nil {
					t.Fatalf("Next(first %d bytes) = %d, %v; want 0, nil", i, n, err)
				}
			}
			// Whole packets need a buffer that holds them.
			if n, err := f.Next(tt.pkt, 0, len(tt.pkt)-1); len(tt.pkt) > 2 && (n != 0 || !isTooLarge(err)) {
				t.Fatalf("Next with a %d-byte limit = %d, %v; want ErrTooLarge", len(tt.pkt)-1, n, err)
			}
		})
	}
}

// TestForEachMQTTMessage decodes chunks of v4 and v5 packets, with control
// packets between the messages, and checks what it refuses.
func TestForEachMQTTMessage(t *testing.T) {
	type msg struct {
		topic, payload string
		qos            byte
		retain         bool
		id             uint16
		key            string // the user property k
	}
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			var want []msg
			chunk := encode(t, suback(v, 1, 0))
			for i := range 40 {
				m := msg{fmt.Sprintf("t/%d/%s", i, strings.Repeat("x", i%5)), strings.Repeat(string(rune('a'+i%26)), (i*137)%700), byte(i % 2), i%7 == 0, 0, ""}
				if m.qos > 0 {
					m.id = uint16(i + 1)
				}
				pk := publish(v, m.qos, uint16(i+1), m.topic, m.payload)
				pk.FixedHeader.Retain = m.retain
				if v == 5 && i%3 == 0 {
					pk = withProps(pk)
					m.key = "v"
				}
				want = append(want, m)
				chunk = append(chunk, encode(t, pk)...)
				if i%10 == 0 {
					chunk = append(chunk, encode(t, pingresp)...)
				}
			}
			chunk = append(chunk, encode(t, publish(v, 0, 0, "ü/ñ", "\x00\xff"))...)
			want = append(want, msg{"ü/ñ", "\x00\xff", 0, false, 0, ""})
			var got []msg
			err := ForEachMQTTMessage(chunk, v, func(m MQTTMessage) error {
				k, _ := m.UserProperty("k")
				got = append(got, msg{string(m.Topic), string(m.Payload), m.QoS, m.Retain, m.ID, string(k)})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("got %d messages %.200s\nwant %d %.200s", len(got), fmt.Sprint(got), len(want), fmt.Sprint(want))
			}
			// A Truncated chunk: the messages before the cut, then the cut.
			got = got[:0]
			err = ForEachMQTTMessage(chunk[:len(chunk)-1], v, func(m MQTTMessage) error {
				k, _ := m.UserProperty("k")
				got = append(got, msg{string(m.Topic), string(m.Payload), m.QoS, m.Retain, m.ID, string(k)})
				return nil
			})
			if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != len(want)-1 {
				t.Fatalf("truncated: %d messages, %v; want %d and io.ErrUnexpectedEOF", len(got), err, len(want)-1)
			}
			stop := errors.New("stop")
			calls := 0
			if err := ForEachMQTTMessage(chunk, v, func(MQTTMessage) error { calls++; return stop }); err != stop || calls != 1 {
				t.Fatalf("fn's error: %v after %d calls", err, calls)
			}
		})
	}
	for _, tt := range []struct {
		name    string
		version byte
		in      []byte
	}{
		{"reserved type", 4, []byte{0x00, 0x00}},
		{"five-byte length", 4, []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"qos3", 4, []byte{0x36, 0x05, 0x00, 0x01, 'a', 0x00, 0x01}},
		{"topic past the end", 4, []byte{0x30, 0x03, 0x00, 0x09, 'a'}},
		{"qos1 without id", 4, []byte{0x32, 0x03, 0x00, 0x01, 'a'}},
		{"v5 properties past the end", 5, []byte{0x30, 0x05, 0x00, 0x01, 'a', 0x02, 0xff}},
		{"v5 properties length unterminated", 5, []byte{0x30, 0x04, 0x00, 0x01, 'a', 0x80}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ForEachMQTTMessage(tt.in, tt.version, func(MQTTMessage) error { return nil })
			if !errors.Is(err, srcs.ErrMalformed) {
				t.Fatalf("ForEachMQTTMessage = %v; want ErrMalformed", err)
			}
		})
	}
}

// testSession attaches a session with a real (idle) connection to m, as
// Open would, without a broker behind it and without its goroutine.
func testSession(t *testing.T, m *MQTT) *mqttSession {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	s := &mqttSession{m: m, conn: c, sock: c, num: 1, t0: time.Now(), ackReady: make(chan struct{}, 1), done: make(chan struct{})}
	if err := s.raw(); err != nil {
		t.Fatal(err)
	}
	m.sess.Store(s)
	m.ackSess = s
	return s
}

// TestMQTTDelivered checks the bookkeeping behind acks: Delivered notes
// where each QoS 1 message ends, counting every byte it is given, and
// Released queues PUBACKs for the messages wholly released, in order.
func TestMQTTDelivered(t *testing.T) {
	m := testMQTT(t, 5, 1, 0)
	s := testSession(t, m)
	sub := encode(t, suback(5, 1, 1))
	p1 := encode(t, withProps(publish(5, 1, 11, "a", "one")))
	p0 := encode(t, publish(5, 0, 0, "b", "zero"))
	p2 := encode(t, publish(5, 1, 12, "c", "two"))
	p3 := encode(t, publish(5, 1, 13, "d", "three"))
	chunk1 := append(append(append([]byte{}, sub...), p1...), p0...)
	chunk2 := append(append([]byte{}, p2...), p3[:len(p3)-1]...) // ends inside p3
	m.Delivered(chunk1, srcs.Records)
	m.Delivered(chunk2, srcs.Records|srcs.Truncated)
	end1 := int64(len(sub) + len(p1))
	end2 := int64(len(chunk1) + len(p2))
	if len(m.recs) != 2 || m.recs[0] != (mqttAck{end1, 1, 11, packets.Puback}) || m.recs[1] != (mqttAck{end2, 1, 12, packets.Puback}) {
		t.Fatalf("ack records %+v; want ends %d and %d", m.recs, end1, end2)
	}
	if st := m.Stats(); st.Messages != 3 || st.Subscribes != 1 {
		t.Fatalf("stats %+v", st)
	}
	m.Released(end1 - 1)
	if len(s.acks) != 0 {
		t.Fatalf("acks %v before the message's release", s.acks)
	}
	m.Released(int64(len(chunk1)))
	if fmt.Sprint(s.acks) != "[{4 11}]" {
		t.Fatalf("acks %v, want a PUBACK of 11", s.acks)
	}
	// The truncated tail's bytes count too: the next session's offsets
	// follow them.
	m.Released(int64(len(chunk1) + len(chunk2)))
	if fmt.Sprint(s.acks) != "[{4 11} {4 12}]" || len(m.recs) != 0 {
		t.Fatalf("acks %v, records %+v; want PUBACKs of 11 and 12 and none left", s.acks, m.recs)
	}
	m.Delivered(p3, srcs.Records)
	if want := int64(len(chunk1) + len(chunk2) + len(p3)); len(m.recs) != 1 || m.recs[0].end != want {
		t.Fatalf("ack records %+v; want one ending at %d", m.recs, want)
	}

	// A chunk that is not framed cuts the session.
	m.Delivered(p0, 0)
	if f := s.failed.Load(); f == nil || !errors.Is(*f, srcs.ErrMalformed) {
		t.Fatalf("an unframed chunk left the session up (failed %v)", f)
	}
}

// TestMQTTQoS2: at QoS 2 a message is answered with a PUBREC once its
// chunk is released, never before, and the broker's PUBREL with a
// PUBCOMP at once; a QoS 2 PUBLISH or a PUBREL is refused by a source
// subscribed at QoS 1.
func TestMQTTQoS2(t *testing.T) {
	m := testMQTT(t, 4, 2, 0)
	s := testSession(t, m)
	p1 := encode(t, publish(4, 2, 21, "a", "one"))
	p2 := encode(t, publish(4, 1, 22, "b", "two"))
	rel := []byte{0x62, 2, 0, 20} // PUBREL of 20, whose PUBREC went before
	for _, p := range [][]byte{p1, p2, rel} {
		if n, err := m.Framer().Next(p, 0, 1<<20); err != nil || n != len(p) {
			t.Fatalf("framer on %x: %d, %v", p, n, err)
		}
	}
	chunk := append(append(append([]byte{}, p1...), rel...), p2...)
	m.Delivered(chunk, srcs.Records)
	if fmt.Sprint(s.acks) != "[{7 20}]" {
		t.Fatalf("acks %v before any release, want the PUBCOMP of 20 alone", s.acks)
	}
	m.Released(int64(len(chunk)))
	if fmt.Sprint(s.acks) != "[{7 20} {5 21} {4 22}]" {
		t.Fatalf("acks %v, want PUBCOMP 20, PUBREC 21, PUBACK 22", s.acks)
	}
	q1 := testMQTT(t, 4, 1, 0)
	for _, p := range [][]byte{p1, rel} {
		if _, err := q1.Framer().Next(p, 0, 1<<20); !errors.Is(err, srcs.ErrMalformed) {
			t.Errorf("a QoS 1 source framed %x: %v", p, err)
		}
	}
	if _, err := m.Framer().Next([]byte{0x60, 2, 0, 1}, 0, 1<<20); !errors.Is(err, srcs.ErrMalformed) {
		t.Errorf("a PUBREL without its flags: %v", err)
	}
}

// framePieces frames in as a runner would, feeding it in pieces of step
// bytes into buffers of size bytes, and returns the chunks it would emit
// and the error that ended the lane (nil if the input ran out).
func framePieces(f srcs.Framer, in []byte, step, size int) (chunks [][]byte, flags []srcs.Flags, err error) {
	buf, n := make([]byte, size), 0
	for off := 0; off < len(in); {
		k := copy(buf[n:], in[off:min(off+step, len(in))])
		off += k
		n += k
		d, err := splitRecords(f, buf, n)
		if err == nil && d == 0 && n == size {
			// A full buffer without a record's end: the lane ends.
			err = &srcs.RecordError{Framer: f.String(), Size: int64(n), Max: size}
		}
		if d > 0 {
			chunks, flags = append(chunks, buf[:d]), append(flags, srcs.Records)
			next := make([]byte, size)
			n = copy(next, buf[d:n])
			buf = next
		}
		if err != nil {
			return chunks, flags, err
		}
	}
	if n > 0 {
		d, _ := splitRecords(f, buf, n)
		chunks, flags = append(chunks, buf[:n]), append(flags, recordFlags(d, n))
	}
	return chunks, flags, nil
}

// FuzzMQTTFraming frames arbitrary broker bytes with a source's framer, in
// pieces, as a runner would: it must never panic; a lane must end only
// with one of the errors the source documents; every chunk must hold the
// input's bytes in order, and whole packets that ForEachMQTTMessage
// decodes; and Delivered must take every chunk.
func FuzzMQTTFraming(f *testing.F) {
	for _, v := range []byte{4, 5} {
		var seed []byte
		seed = append(seed, encode(f, suback(v, 1, 1))...)
		seed = append(seed, encode(f, publish(v, 0, 0, "a/b", "hello"))...)
		seed = append(seed, encode(f, publish(v, 1, 9, "c", strings.Repeat("z", 300)))...)
		seed = append(seed, encode(f, pingresp)...)
		if v == 5 {
			seed = append(seed, encode(f, withProps(publish(v, 1, 3, "p", "q")))...)
		}
		f.Add(v == 5, uint8(7), uint8(20), seed)
	}
	f.Add(false, uint8(1), uint8(0), []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add(true, uint8(2), uint8(3), []byte{0x32, 0x05, 0x00, 0x01, 'a', 0x00, 0x01})
	f.Fuzz(func(t *testing.T, v5 bool, step, size uint8, in []byte) {
		version := byte(4)
		if v5 {
			version = 5
		}
		m := testMQTT(t, version, 1, 1<<10)
		m.subSent.Store(true)
		chunks, flags, err := framePieces(m.Framer(), in, max(int(step), 1), 16+int(size)*8)
		if err != nil {
			var se *MQTTSubscribeError
			if !errors.Is(err, srcs.ErrMalformed) && !errors.Is(err, srcs.ErrTooLarge) && !errors.As(err, &se) &&
				!strings.Contains(err.Error(), "broker disconnected") {
				t.Fatalf("lane error %v is not one the source documents", err)
			}
		}
		var out []byte
		for i, c := range chunks {
			out = append(out, c...)
			err := ForEachMQTTMessage(c, version, func(MQTTMessage) error { return nil })
			if err != nil && !(flags[i]&srcs.Truncated != 0 && errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Fatalf("chunk %d (flags %v) does not decode: %v", i, flags[i], err)
			}
			m.Delivered(c, flags[i])
		}
		if !bytes.HasPrefix(in, out) {
			t.Fatal("the chunks are not the input's bytes in order")
		}
		m.Released(math.MaxInt64)
	})
}

// TestMQTTFramingAllocs: framing a chunk of QoS 0 messages, noting them
// (Delivered) and decoding them allocates nothing.
func TestMQTTFramingAllocs(t *testing.T) {
	m := testMQTT(t, 5, 1, 0)
	var chunk []byte
	for i := range 50 {
		chunk = append(chunk, encode(t, withProps(publish(5, 0, 0, fmt.Sprintf("t/%d", i), strings.Repeat("x", i*10))))...)
	}
	f := m.Framer()
	allocs := testing.AllocsPerRun(100, func() {
		for off := 0; off < len(chunk); {
			n, err := f.Next(chunk[off:], 0, 1<<16)
			if err != nil || n == 0 {
				t.Fatal(n, err)
			}
			off += n
		}
		if err := ForEachMQTTMessage(chunk, 5, func(MQTTMessage) error { return nil }); err != nil {
			t.Fatal(err)
		}
		m.Delivered(chunk, srcs.Records)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per chunk, want 0", allocs)
	}
}

// FuzzForEachMQTTMessage decodes arbitrary bytes as a chunk: it must never
// panic, fail only as documented, and hand out only bytes of its input;
// Delivered must take the same bytes.
func FuzzForEachMQTTMessage(f *testing.F) {
	f.Add(false, encode(f, publish(4, 1, 9, "a/b", "hello")))
	f.Add(true, encode(f, withProps(publish(5, 0, 0, "c", "x"))))
	f.Add(true, []byte{0x30, 0x04, 0x00, 0x01, 'a', 0x80})
	f.Fuzz(func(t *testing.T, v5 bool, in []byte) {
		version := byte(4)
		if v5 {
			version = 5
		}
		inside := func(b []byte) bool { return bytes.Contains(in, b) }
		err := ForEachMQTTMessage(in, version, func(m MQTTMessage) error {
			if !inside(m.Topic) || !inside(m.Payload) || m.QoS > 2 {
				t.Fatalf("message %+v is not a view of the input", m)
			}
			return nil
		})
		if err != nil && !errors.Is(err, srcs.ErrMalformed) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error %v wraps neither ErrMalformed nor io.ErrUnexpectedEOF", err)
		}
		m := testMQTT(t, version, 1, 0)
		m.Delivered(in, srcs.Records|srcs.Truncated)
	})
}

func benchChunk(b *testing.B, version byte) []byte {
	var chunk []byte
	for i := 0; len(chunk) < 60<<10; i++ {
		chunk = append(chunk, encode(b, publish(version, 1, uint16(i%65535+1), fmt.Sprintf("sensors/%d", i%100), strings.Repeat("x", 100+i%200)))...)
	}
	return chunk
}

// BenchmarkMQTTFramer frames a 60 KiB chunk of QoS 1 messages, checking
// every packet, as a runner does after each read.
func BenchmarkMQTTFramer(b *testing.B) {
	for _, v := range []byte{4, 5} {
		b.Run(fmt.Sprintf("v%d", v), func(b *testing.B) {
			f := testMQTT(b, v, 1, 0).Framer()
			chunk := benchChunk(b, v)
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			msgs := 0
			for b.Loop() {
				for off := 0; off < len(chunk); msgs++ {
					n, err := f.Next(chunk[off:], 0, 1<<16)
					if err != nil || n == 0 {
						b.Fatal(n, err)
					}
					off += n
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
		})
	}
}

// BenchmarkForEachMQTTMessage decodes a 60 KiB chunk, as a consumer does.
func BenchmarkForEachMQTTMessage(b *testing.B) {
	chunk := benchChunk(b, 5)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	msgs := 0
	for b.Loop() {
		if err := ForEachMQTTMessage(chunk, 5, func(MQTTMessage) error { msgs++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
}

// BenchmarkMQTTDelivered notes the QoS 1 messages of a 60 KiB chunk and
// releases them, as the engine does for every chunk.
func BenchmarkMQTTDelivered(b *testing.B) {
	m := testMQTT(b, 5, 1, 0)
	m.ackSess = &mqttSession{m: m, num: 1, ackReady: make(chan struct{}, 1)}
	chunk := benchChunk(b, 5)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	var through int64
	for b.Loop() {
		m.Delivered(chunk, srcs.Records)
		through += int64(len(chunk))
		m.Released(through)
		m.ackSess.acks = m.ackSess.acks[:0]
	}
}
