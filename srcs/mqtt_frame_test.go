package srcs

// Internal tests: the fuzz target for the packet decoder drives Read over
// an in-memory broker stream, which needs the unexported session.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

type testMsg struct{ topic, payload string }

func testMessages() []testMsg {
	var ms []testMsg
	for i := range 40 {
		ms = append(ms, testMsg{
			topic:   fmt.Sprintf("t/%d/%s", i, strings.Repeat("x", i%5)),
			payload: strings.Repeat(string(rune('a'+i%26)), (i*137)%700),
		})
	}
	return append(ms, testMsg{"empty", ""}, testMsg{"ü/ñ", "\x00\xff"})
}

// TestFrameReaderSplits feeds a frame stream cut at every possible place,
// in pieces of every size up to 9, and checks every message comes out
// whole and in order.
func TestFrameReaderSplits(t *testing.T) {
	ms := testMessages()
	var stream []byte
	for _, m := range ms {
		stream = AppendMQTTFrame(stream, m.topic, []byte(m.payload))
	}
	for step := 1; step <= 9; step++ {
		var r FrameReader
		var got []testMsg
		for off := 0; off < len(stream); off += step {
			r.Write(stream[off:min(off+step, len(stream))])
			for {
				m, ok, err := r.Next()
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if !ok {
					break
				}
				got = append(got, testMsg{string(m.Topic), string(m.Payload)})
			}
		}
		if len(got) != len(ms) {
			t.Fatalf("step %d: %d messages, want %d", step, len(got), len(ms))
		}
		for i := range ms {
			if got[i] != ms[i] {
				t.Fatalf("step %d: message %d = %q, want %q", step, i, got[i], ms[i])
			}
		}
		if r.Buffered() != 0 {
			t.Fatalf("step %d: %d bytes left", step, r.Buffered())
		}
	}
}

func TestFrameReaderMalformed(t *testing.T) {
	le := func(l uint32, t uint16, rest string) []byte {
		b := binary.LittleEndian.AppendUint32(nil, l)
		return append(binary.BigEndian.AppendUint16(b, t), rest...)
	}
	tests := []struct {
		name string
		in   []byte
		max  int
	}{
		{"length below topic length field", le(1, 0, "x"), 0},
		{"topic longer than frame", le(5, 4, "abcd"), 0},
		{"payload above MaxMessage", le(2+1+11, 1, "t0123456789a"), 10},
		{"absurd length", le(0xffffffff, 1, "t"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := FrameReader{MaxMessage: tt.max}
			r.Write(tt.in)
			_, ok, err := r.Next()
			if ok || !errors.Is(err, ErrMalformed) {
				t.Fatalf("Next = %v, %v; want ErrMalformed", ok, err)
			}
			// Sticky: a later frame cannot be trusted.
			r.Write(AppendMQTTFrame(nil, "a", nil))
			if _, _, err2 := r.Next(); !errors.Is(err2, ErrMalformed) {
				t.Fatalf("second Next = %v; want the error again", err2)
			}
		})
	}
}

// FuzzFrameReader feeds arbitrary bytes in arbitrary pieces: Next must
// never panic, never return a message it was not given, and re-encoding
// what it returns must reproduce the input up to the point it stopped.
func FuzzFrameReader(f *testing.F) {
	f.Add(AppendMQTTFrame(AppendMQTTFrame(nil, "a/b", []byte("hello")), "c", nil), uint8(3))
	f.Add([]byte{1, 0, 0, 0, 0}, uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0}, uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		r := FrameReader{MaxMessage: 1 << 16}
		s := max(int(step), 1)
		var out []byte
		var failed bool
		for off := 0; off < len(in) && !failed; off += s {
			r.Write(in[off:min(off+s, len(in))])
			for {
				m, ok, err := r.Next()
				if err != nil {
					if !errors.Is(err, ErrMalformed) {
						t.Fatalf("error %v does not wrap ErrMalformed", err)
					}
					failed = true
					break
				}
				if !ok {
					break
				}
				out = AppendMQTTFrame(out, string(m.Topic), m.Payload)
			}
		}
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("re-encoded messages are not a prefix of the input")
		}
		if !failed && len(out)+r.Buffered() != len(in) {
			t.Fatalf("%d bytes returned + %d buffered != %d written", len(out), r.Buffered(), len(in))
		}
	})
}

// newTestMQTT returns a source whose current session reads the broker
// stream from rd, without a connection: the reading side of Read only.
func newTestMQTT(t testing.TB, version byte, maxMsg int, rd io.Reader) *MQTT {
	m, err := NewMQTT(MQTTConfig{Broker: "localhost:1883", Topics: []string{"#"}, CleanSession: true, Version: version, MaxMessage: maxMsg})
	if err != nil {
		t.Fatal(err)
	}
	s := &mqttSession{m: m, num: 1, t0: time.Now(), ackReady: make(chan struct{}, 1), done: make(chan struct{})}
	s.rd = newMQTTReader(rd, m.cfg.Version, m.cfg.MaxMessage)
	m.sess, m.ackSess = s, s
	return m
}

func encode(t testing.TB, pk packets.Packet) []byte {
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Pingresp:
		err = pk.PingrespEncode(&b)
	case packets.Suback:
		err = pk.SubackEncode(&b)
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

// TestMQTTReadDoesNotWaitOnceItHasData: with one whole PUBLISH and half of
// the next one available, Read returns the first frame instead of waiting
// for the rest, and the next Read completes the second.
func TestMQTTReadDoesNotWaitOnceItHasData(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	m := newTestMQTT(t, 4, 0, pr)
	first := encode(t, publish(4, 0, 0, "a", "one"))
	second := encode(t, publish(4, 1, 7, "b", "two"))
	go pw.Write(append(first, second[:3]...))
	buf := make([]byte, 1024)
	n, err := m.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], AppendMQTTFrame(nil, "a", []byte("one"))) {
		t.Fatalf("first Read = %q, %v", buf[:n], err)
	}
	go func() {
		pw.Write(second[3:])
		pw.Close()
	}()
	n, err = m.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], AppendMQTTFrame(nil, "b", []byte("two"))) {
		t.Fatalf("second Read = %q, %v", buf[:n], err)
	}
	if _, err := m.Read(buf); err != io.EOF {
		t.Fatalf("third Read = %v, want io.EOF", err)
	}
	if len(m.recs) != 1 || m.recs[0].id != 7 || m.recs[0].end != int64(len(AppendMQTTFrame(AppendMQTTFrame(nil, "a", []byte("one")), "b", []byte("two")))) {
		t.Fatalf("ack records = %+v", m.recs)
	}
}

// FuzzDecode feeds arbitrary bytes as a broker's stream to Read, in small
// reads: it must never panic, never return (0, nil), end with an error,
// and the frames it returns must parse.
func FuzzDecode(f *testing.F) {
	for _, v := range []byte{4, 5} {
		var seed []byte
		seed = append(seed, encode(f, publish(v, 0, 0, "a/b", "hello"))...)
		seed = append(seed, encode(f, publish(v, 1, 9, "c", strings.Repeat("z", 300)))...)
		seed = append(seed, encode(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}})...)
		seed = append(seed, encode(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ProtocolVersion: v, PacketID: 1, ReasonCodes: []byte{1}})...)
		f.Add(v == 5, uint8(7), seed)
	}
	f.Add(false, uint8(1), []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add(true, uint8(2), []byte{0x32, 0x05, 0x00, 0x01, 'a', 0x00, 0x01})
	f.Fuzz(func(t *testing.T, v5 bool, step uint8, in []byte) {
		version := byte(4)
		if v5 {
			version = 5
		}
		m := newTestMQTT(t, version, 1<<12, bytes.NewReader(in))
		var fr FrameReader
		buf := make([]byte, max(int(step), 1))
		var total int64
		for range 10 * (len(in) + 10) {
			n, err := m.Read(buf)
			if n == 0 && err == nil {
				t.Fatal("Read returned (0, nil)")
			}
			total += int64(n)
			fr.Write(buf[:n])
			m.Released(total)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, io.ErrUnexpectedEOF) &&
					!strings.Contains(err.Error(), "broker disconnected") {
					t.Fatalf("Read error %v is not one of the decoder's", err)
				}
				for {
					_, ok, err := fr.Next()
					if err != nil {
						t.Fatalf("frames from Read do not parse: %v", err)
					}
					if !ok {
						break
					}
				}
				if fr.Buffered() != 0 {
					t.Fatalf("a session ended inside a frame: %d bytes", fr.Buffered())
				}
				return
			}
		}
		t.Fatal("Read never reached the end of the input")
	})
}
