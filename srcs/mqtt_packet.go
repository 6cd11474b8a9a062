package srcs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/mochi-mqtt/server/v2/packets"
)

// An MQTT subscriber's chunks.
//
// An MQTT source's socket is read by a runner like any other stream, and
// framed by the source's Framer: every chunk has the Records flag, starts at
// a packet boundary and holds whole MQTT control packets exactly as the
// broker sent them (fixed header, remaining length, variable header,
// payload). Only the last chunk of a session that ended inside a packet
// also has the Truncated flag, and ends with the start of that packet.
//
// The packets are the broker's PUBLISHes and the few control packets it may
// send a subscriber: the SUBACK, PINGRESPs, and an MQTT 5 DISCONNECT. The
// framer has checked every packet a chunk holds (see MQTT.Framer), so a
// consumer only has to take the messages out: ForEachMQTTMessage does, and
// skips the rest. A message never spans two chunks.

var (
	// ErrMalformed marks bytes that break a protocol or a framing: an MQTT
	// packet the broker should not have sent (undecodable, or unexpected
	// in its place), or a record header a framer cannot parse.
	ErrMalformed = errors.New("srcs: malformed input")
	// ErrTooLarge marks an MQTT message larger than the configured
	// MaxMessage, or than a pool buffer can hold.
	ErrTooLarge = errors.New("srcs: message too large")
)

const (
	// mqttOverhead bounds what a PUBLISH carries besides its payload in
	// practice: a 64 KiB topic and as much again for v5 properties.
	mqttOverhead = 2 + math.MaxUint16 + 2 + 64<<10
	// mqttMaxRemaining is the protocol's largest remaining length.
	mqttMaxRemaining = 268435455
	// mqttSubID is the packet id of the SUBSCRIBE, the only packet id
	// this client allocates.
	mqttSubID = 1
)

// MQTTMessage is one PUBLISH of a chunk. Topic and Payload alias the
// chunk's data: they are valid until the chunk is released.
type MQTTMessage struct {
	Topic   []byte
	Payload []byte
	// QoS is the message's quality of service as delivered: 0 or 1 from
	// an MQTT source, whose framer refuses QoS 2.
	QoS byte
	// Retain marks a retained message the broker sent on subscribing.
	Retain bool
	// Dup marks a QoS 1 message the broker may have delivered before.
	Dup bool
}

// ForEachMQTTMessage calls fn with each PUBLISH in data, in order, and skips
// the control packets between them. data must start at a packet boundary:
// the Data of a chunk with the Records flag from an MQTT source (or from any
// lane framed with MQTTPackets). version is the protocol level the packets
// were sent with, 4 or 5 (0 means 4, as in MQTTConfig); MQTT 5 properties
// are skipped. It allocates nothing.
//
// An error from fn stops the walk and is returned as it is. A packet that
// cannot be decoded returns an error wrapping ErrMalformed, and data that
// ends inside a packet (the tail of a chunk with the Truncated flag) one
// wrapping io.ErrUnexpectedEOF, both after fn has seen the messages before
// it.
func ForEachMQTTMessage(data []byte, version byte, fn func(MQTTMessage) error) error {
	for off := 0; off < len(data); {
		hl, n, err := mqttPacketLen(data[off:])
		if err != nil {
			return fmt.Errorf("srcs: mqtt packet at offset %d: %w", off, err)
		}
		if n == 0 {
			return fmt.Errorf("srcs: mqtt packet at offset %d: %d bytes left, cut short: %w", off, len(data)-off, io.ErrUnexpectedEOF)
		}
		h := data[off]
		if h>>4 == packets.Publish {
			pub, err := parseMQTTPublish(h, data[off+hl:off+n], version)
			if err != nil {
				return fmt.Errorf("srcs: mqtt PUBLISH at offset %d: %w", off, err)
			}
			if err := fn(MQTTMessage{Topic: pub.topic, Payload: pub.payload, QoS: pub.qos, Retain: h&1 != 0, Dup: h&8 != 0}); err != nil {
				return err
			}
		}
		off += n
	}
	return nil
}

// mqttPacketLen parses the fixed header at the start of p and returns its
// length and the whole packet's. n is 0 when p ends before the packet does
// (or before its header). An error wraps ErrMalformed.
func mqttPacketLen(p []byte) (hl, n int, err error) {
	if len(p) == 0 {
		return 0, 0, nil
	}
	if p[0]>>4 == 0 {
		return 0, 0, fmt.Errorf("packet type 0 (header 0x%02x): %w", p[0], ErrMalformed)
	}
	rem := 0
	for i := 1; i < 5; i++ {
		if i >= len(p) {
			return 0, 0, nil
		}
		rem |= int(p[i]&0x7f) << (7 * (i - 1))
		if p[i]&0x80 == 0 {
			if n := i + 1 + rem; n <= len(p) {
				return i + 1, n, nil
			}
			return i + 1, 0, nil
		}
	}
	return 0, 0, fmt.Errorf("remaining length longer than 4 bytes: %w", ErrMalformed)
}

// mqttPublish is a decoded PUBLISH; its slices alias the packet.
type mqttPublish struct {
	qos     byte
	id      uint16 // 0 at QoS 0
	topic   []byte
	props   []byte // MQTT 5 properties, without their length
	payload []byte
}

// parseMQTTPublish decodes the body of a PUBLISH whose fixed header's first
// byte is h. It checks only what it needs to find the parts; errors wrap
// ErrMalformed.
func parseMQTTPublish(h byte, body []byte, version byte) (mqttPublish, error) {
	var pub mqttPublish
	pub.qos = (h >> 1) & 3
	if pub.qos == 3 {
		return pub, fmt.Errorf("QoS 3: %w", ErrMalformed)
	}
	if len(body) < 2 {
		return pub, fmt.Errorf("%d-byte body has no topic length: %w", len(body), ErrMalformed)
	}
	t := 2 + (int(body[0])<<8 | int(body[1]))
	if t > len(body) {
		return pub, fmt.Errorf("%d-byte topic runs past the %d-byte body: %w", t-2, len(body), ErrMalformed)
	}
	pub.topic = body[2:t:t]
	rest := body[t:]
	if pub.qos > 0 {
		if len(rest) < 2 {
			return pub, fmt.Errorf("QoS %d without a packet id: %w", pub.qos, ErrMalformed)
		}
		pub.id = uint16(rest[0])<<8 | uint16(rest[1])
		rest = rest[2:]
	}
	if version == 5 {
		props, after, err := mqttProps(rest)
		if err != nil {
			return pub, err
		}
		pub.props, rest = props, after
	}
	pub.payload = rest
	return pub, nil
}

// mqttProps splits MQTT 5 properties, led by their length, from what
// follows them. Errors wrap ErrMalformed.
func mqttProps(b []byte) (props, rest []byte, err error) {
	n, k, err := mqttVarint(b)
	if err != nil {
		return nil, nil, fmt.Errorf("properties length: %w", err)
	}
	if n > len(b)-k {
		return nil, nil, fmt.Errorf("%d bytes of properties run past the packet's %d: %w", n, len(b)-k, ErrMalformed)
	}
	return b[k : k+n], b[k+n:], nil
}

// mqttVarint decodes a variable byte integer and returns it and its length.
func mqttVarint(b []byte) (v, n int, err error) {
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0, fmt.Errorf("variable byte integer runs past the packet: %w", ErrMalformed)
		}
		v |= int(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("variable byte integer longer than 4 bytes: %w", ErrMalformed)
}

// The encodings of MQTT 5 property values.
const (
	propByte = iota + 1
	propUint16
	propUint32
	propVarint
	propString
	propBinary
	propPair
)

// mqttPropKinds gives, by identifier, the encoding of every MQTT 5
// property a broker may send a subscriber and the packets it may come in;
// a zero entry is a property it may not send.
var mqttPropKinds = [0x27]struct {
	kind    uint8
	packets uint16 // 1 << packet type
}{
	0x01: {propByte, 1 << packets.Publish},                                           // payload format indicator
	0x02: {propUint32, 1 << packets.Publish},                                         // message expiry interval
	0x03: {propString, 1 << packets.Publish},                                         // content type
	0x08: {propString, 1 << packets.Publish},                                         // response topic
	0x09: {propBinary, 1 << packets.Publish},                                         // correlation data
	0x0B: {propVarint, 1 << packets.Publish},                                         // subscription identifier
	0x11: {propUint32, 1 << packets.Disconnect},                                      // session expiry interval
	0x1C: {propString, 1 << packets.Disconnect},                                      // server reference
	0x1F: {propString, 1<<packets.Suback | 1<<packets.Disconnect},                    // reason string
	0x23: {propUint16, 1 << packets.Publish},                                         // topic alias
	0x26: {propPair, 1<<packets.Publish | 1<<packets.Suback | 1<<packets.Disconnect}, // user property
}

// checkMQTTProps checks that props (without their length) is a sequence
// of well-formed properties allowed in a packet of type pkt, with valid
// UTF-8 strings. It returns the reason string, if one came. Errors wrap
// ErrMalformed.
func checkMQTTProps(props []byte, pkt byte) (reason []byte, err error) {
	for b := props; len(b) > 0; {
		id := b[0]
		if int(id) >= len(mqttPropKinds) || mqttPropKinds[id].packets&(1<<pkt) == 0 {
			return nil, fmt.Errorf("property 0x%02x not allowed in %s: %w", id, packets.PacketNames[pkt], ErrMalformed)
		}
		b = b[1:]
		var s, v []byte
		switch mqttPropKinds[id].kind {
		case propByte:
			b, err = mqttSkip(b, 1)
		case propUint16:
			b, err = mqttSkip(b, 2)
		case propUint32:
			b, err = mqttSkip(b, 4)
		case propVarint:
			var n int
			if _, n, err = mqttVarint(b); err == nil {
				b = b[n:]
			}
		case propBinary:
			_, b, err = mqttString(b)
		case propString:
			if s, b, err = mqttString(b); err == nil && !validMQTTString(s) {
				err = fmt.Errorf("string is not valid UTF-8: %w", ErrMalformed)
			}
		case propPair:
			if s, b, err = mqttString(b); err == nil {
				v, b, err = mqttString(b)
			}
			if err == nil && (!validMQTTString(s) || !validMQTTString(v)) {
				err = fmt.Errorf("string is not valid UTF-8: %w", ErrMalformed)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("property 0x%02x: %w", id, err)
		}
		if id == 0x1F {
			reason = s
		}
	}
	return reason, nil
}

// mqttSkip drops n bytes from the front of b.
func mqttSkip(b []byte, n int) ([]byte, error) {
	if len(b) < n {
		return nil, fmt.Errorf("%d-byte value runs past the properties: %w", n, ErrMalformed)
	}
	return b[n:], nil
}

// mqttString splits a length-prefixed string or binary value from the
// front of b.
func mqttString(b []byte) (s, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, fmt.Errorf("length runs past the properties: %w", ErrMalformed)
	}
	n := 2 + (int(b[0])<<8 | int(b[1]))
	if n > len(b) {
		return nil, nil, fmt.Errorf("%d-byte value runs past the properties: %w", n-2, ErrMalformed)
	}
	return b[2:n:n], b[n:], nil
}

// validMQTTString applies the protocol's rule for UTF-8 strings received.
func validMQTTString(b []byte) bool {
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// mqttFramer frames an MQTT subscriber's stream into packets and checks
// each packet as it completes, so that a chunk holds only packets a broker
// may send this subscriber. It keeps no state of its own: what it checks
// against (the configuration, whether this session subscribed) lives in
// the source, so one framer serves every session of the source.
type mqttFramer struct {
	m  *MQTT
	pk MQTTPackets
}

func (f *mqttFramer) String() string { return f.pk.String() }

// Next implements Framer.
func (f *mqttFramer) Next(p []byte, seen, limit int) (int, error) {
	n, err := f.pk.Next(p, seen, limit)
	if err != nil || n == 0 {
		return n, err
	}
	if err := f.m.checkPacket(p[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

// checkHeader vets a packet's first byte as soon as it arrives, so that
// garbage ends the session before a body it announces would be awaited.
func (m *MQTT) checkHeader(h byte) error {
	t := h >> 4
	switch {
	case t == packets.Publish && (h>>1)&3 == 3:
		return fmt.Errorf("srcs: mqtt %s: PUBLISH with QoS 3 (header 0x%02x): %w", m.name, h, ErrMalformed)
	case t == packets.Publish && (h>>1)&3 == 2:
		// This client subscribes at QoS 1 at most.
		return fmt.Errorf("srcs: mqtt %s: QoS 2 PUBLISH, above every subscription's QoS: %w", m.name, ErrMalformed)
	case t == packets.Publish:
		return nil
	case t == packets.Suback, t == packets.Pingresp, t == packets.Disconnect:
		if h&0x0f != 0 {
			return fmt.Errorf("srcs: mqtt %s: %s with reserved flags 0x%x: %w", m.name, packets.PacketNames[t], h&0x0f, ErrMalformed)
		}
		return nil
	}
	return fmt.Errorf("srcs: mqtt %s: unexpected %s packet (header 0x%02x): %w", m.name, packets.PacketNames[t], h, ErrMalformed)
}

// checkPacket checks a whole packet, whose header checkHeader passed. It
// must not change the source's state: the source counts what it delivers
// in Delivered.
func (m *MQTT) checkPacket(p []byte) error {
	hl, _, _ := mqttPacketLen(p) // the framer parsed it
	h, body := p[0], p[hl:]
	v := m.cfg.Version
	switch h >> 4 {
	case packets.Publish:
		pub, err := parseMQTTPublish(h, body, v)
		if err == nil && v == 5 {
			_, err = checkMQTTProps(pub.props, packets.Publish)
		}
		switch {
		case err != nil:
		case len(pub.topic) == 0:
			// A topic alias: this client never allows the broker any.
			err = fmt.Errorf("empty topic name: %w", ErrMalformed)
		case !validMQTTString(pub.topic):
			err = fmt.Errorf("topic name is not valid UTF-8: %w", ErrMalformed)
		case pub.qos > 0 && pub.id == 0:
			err = fmt.Errorf("QoS %d with packet id 0: %w", pub.qos, ErrMalformed)
		case len(pub.payload) > m.cfg.MaxMessage:
			return &RecordError{Framer: m.framer.String(), Size: int64(len(p)), Max: len(p) - len(pub.payload) + m.cfg.MaxMessage, Also: ErrTooLarge}
		}
		if err != nil {
			return fmt.Errorf("srcs: mqtt %s: PUBLISH: %w", m.name, err)
		}
	case packets.Suback:
		return m.checkSuback(body)
	case packets.Pingresp:
		if len(body) != 0 {
			return fmt.Errorf("srcs: mqtt %s: PINGRESP with a %d-byte body: %w", m.name, len(body), ErrMalformed)
		}
	case packets.Disconnect:
		return m.checkDisconnect(body)
	}
	return nil
}

// checkSuback checks the SUBACK against the SUBSCRIBE this session sent.
func (m *MQTT) checkSuback(body []byte) error {
	if !m.subSent.Load() {
		return fmt.Errorf("srcs: mqtt %s: SUBACK, but this session sent no SUBSCRIBE: %w", m.name, ErrMalformed)
	}
	malformed := func(err error) error {
		return &MQTTSubscribeError{Broker: m.cfg.Broker, Reason: "malformed SUBACK", Err: err}
	}
	if len(body) < 2 {
		return malformed(fmt.Errorf("%d-byte SUBACK has no packet id: %w", len(body), ErrMalformed))
	}
	id, codes := uint16(body[0])<<8|uint16(body[1]), body[2:]
	var reason []byte
	if m.cfg.Version == 5 {
		props, rest, err := mqttProps(codes)
		if err == nil {
			reason, err = checkMQTTProps(props, packets.Suback)
		}
		if err != nil {
			return malformed(err)
		}
		codes = rest
	}
	if id != mqttSubID || len(codes) != len(m.cfg.Topics) {
		return &MQTTSubscribeError{Broker: m.cfg.Broker,
			Reason: fmt.Sprintf("SUBACK for packet %d with %d codes, want packet %d with %d", id, len(codes), mqttSubID, len(m.cfg.Topics)),
			Err:    ErrMalformed}
	}
	for i, c := range codes {
		if c >= 0x80 {
			r := mqttReason(m.cfg.Version, packets.Suback, c)
			if len(reason) > 0 {
				r += ": " + string(reason)
			}
			return &MQTTSubscribeError{Broker: m.cfg.Broker, Filter: m.cfg.Topics[i], Code: c, Reason: r}
		}
	}
	return nil
}

// checkDisconnect turns a DISCONNECT from the broker into the error that
// ends the session, or nil for a normal disconnection: then the broker
// closes the connection, and the engine reconnects.
func (m *MQTT) checkDisconnect(body []byte) error {
	if len(body) == 0 {
		return nil // reason 0, normal disconnection
	}
	if m.cfg.Version != 5 {
		return fmt.Errorf("srcs: mqtt %s: DISCONNECT with a %d-byte body: %w", m.name, len(body), ErrMalformed)
	}
	code := body[0]
	var reason []byte
	if len(body) > 1 {
		props, rest, err := mqttProps(body[1:])
		if err == nil && len(rest) != 0 {
			err = fmt.Errorf("%d bytes after the properties: %w", len(rest), ErrMalformed)
		}
		if err == nil {
			reason, err = checkMQTTProps(props, packets.Disconnect)
		}
		if err != nil {
			return fmt.Errorf("srcs: mqtt %s: DISCONNECT: %w", m.name, err)
		}
	}
	if code == 0 {
		return nil
	}
	if len(reason) > 0 {
		return fmt.Errorf("srcs: mqtt %s: broker disconnected: %s (0x%02x): %s", m.name, mqttReason(5, packets.Disconnect, code), code, reason)
	}
	return fmt.Errorf("srcs: mqtt %s: broker disconnected: %s (0x%02x)", m.name, mqttReason(5, packets.Disconnect, code), code)
}

var _ Framer = (*mqttFramer)(nil)
