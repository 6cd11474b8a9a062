package mqtt

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/mochi-mqtt/server/v2/packets"
)

// MaxRemaining is the protocol's largest remaining length.
const MaxRemaining = 268435455

// Codec decodes the packets a broker sends a subscriber. Its errors wrap
// Malformed, the error its caller gives bytes that break the protocol
// (srcs.ErrMalformed). A Codec is a value without state, safe for
// concurrent use.
type Codec struct {
	Malformed error
}

// PacketLen parses the fixed header at the start of p and returns its
// length and the whole packet's. n is 0 when p ends before the packet does
// (or before its header). An error wraps c.Malformed.
func (c Codec) PacketLen(p []byte) (hl, n int, err error) {
	if len(p) == 0 {
		return 0, 0, nil
	}
	if p[0]>>4 == 0 {
		return 0, 0, fmt.Errorf("packet type 0 (header 0x%02x): %w", p[0], c.Malformed)
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
	return 0, 0, fmt.Errorf("remaining length longer than 4 bytes: %w", c.Malformed)
}

// Publish is a decoded PUBLISH; its slices alias the packet.
type Publish struct {
	QoS     byte
	ID      uint16 // 0 at QoS 0
	Topic   []byte
	Props   []byte // MQTT 5 properties, without their length
	Payload []byte
}

// ParsePublish decodes the body of a PUBLISH whose fixed header's first
// byte is h. It checks only what it needs to find the parts; errors wrap
// c.Malformed.
func (c Codec) ParsePublish(h byte, body []byte, version byte) (Publish, error) {
	var pub Publish
	pub.QoS = (h >> 1) & 3
	if pub.QoS == 3 {
		return pub, fmt.Errorf("QoS 3: %w", c.Malformed)
	}
	if len(body) < 2 {
		return pub, fmt.Errorf("%d-byte body has no topic length: %w", len(body), c.Malformed)
	}
	t := 2 + (int(body[0])<<8 | int(body[1]))
	if t > len(body) {
		return pub, fmt.Errorf("%d-byte topic runs past the %d-byte body: %w", t-2, len(body), c.Malformed)
	}
	pub.Topic = body[2:t:t]
	rest := body[t:]
	if pub.QoS > 0 {
		if len(rest) < 2 {
			return pub, fmt.Errorf("QoS %d without a packet id: %w", pub.QoS, c.Malformed)
		}
		pub.ID = uint16(rest[0])<<8 | uint16(rest[1])
		rest = rest[2:]
	}
	if version == 5 {
		props, after, err := c.Props(rest)
		if err != nil {
			return pub, err
		}
		pub.Props, rest = props, after
	}
	pub.Payload = rest
	return pub, nil
}

// Props splits MQTT 5 properties, led by their length, from what
// follows them. Errors wrap c.Malformed.
func (c Codec) Props(b []byte) (props, rest []byte, err error) {
	n, k, err := c.varint(b)
	if err != nil {
		return nil, nil, fmt.Errorf("properties length: %w", err)
	}
	if n > len(b)-k {
		return nil, nil, fmt.Errorf("%d bytes of properties run past the packet's %d: %w", n, len(b)-k, c.Malformed)
	}
	return b[k : k+n], b[k+n:], nil
}

// varint decodes a variable byte integer and returns it and its length.
func (c Codec) varint(b []byte) (v, n int, err error) {
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0, fmt.Errorf("variable byte integer runs past the packet: %w", c.Malformed)
		}
		v |= int(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("variable byte integer longer than 4 bytes: %w", c.Malformed)
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

// propKinds gives, by identifier, the encoding of every MQTT 5
// property a broker may send a subscriber and the packets it may come in;
// a zero entry is a property it may not send.
var propKinds = [0x27]struct {
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

// CheckProps checks that props (without their length) is a sequence
// of well-formed properties allowed in a packet of type pkt, with valid
// UTF-8 strings. It returns the reason string, if one came. Errors wrap
// c.Malformed.
func (c Codec) CheckProps(props []byte, pkt byte) (reason []byte, err error) {
	for b := props; len(b) > 0; {
		id := b[0]
		if int(id) >= len(propKinds) || propKinds[id].packets&(1<<pkt) == 0 {
			return nil, fmt.Errorf("property 0x%02x not allowed in %s: %w", id, packets.PacketNames[pkt], c.Malformed)
		}
		b = b[1:]
		var s, v []byte
		switch propKinds[id].kind {
		case propByte:
			b, err = c.skip(b, 1)
		case propUint16:
			b, err = c.skip(b, 2)
		case propUint32:
			b, err = c.skip(b, 4)
		case propVarint:
			var n int
			if _, n, err = c.varint(b); err == nil {
				b = b[n:]
			}
		case propBinary:
			_, b, err = c.prefixed(b)
		case propString:
			if s, b, err = c.prefixed(b); err == nil && !ValidString(s) {
				err = fmt.Errorf("string is not valid UTF-8: %w", c.Malformed)
			}
		case propPair:
			if s, b, err = c.prefixed(b); err == nil {
				v, b, err = c.prefixed(b)
			}
			if err == nil && (!ValidString(s) || !ValidString(v)) {
				err = fmt.Errorf("string is not valid UTF-8: %w", c.Malformed)
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

// skip drops n bytes from the front of b.
func (c Codec) skip(b []byte, n int) ([]byte, error) {
	if len(b) < n {
		return nil, fmt.Errorf("%d-byte value runs past the properties: %w", n, c.Malformed)
	}
	return b[n:], nil
}

// prefixed splits a length-prefixed string or binary value from the
// front of b.
func (c Codec) prefixed(b []byte) (s, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, fmt.Errorf("length runs past the properties: %w", c.Malformed)
	}
	n := 2 + (int(b[0])<<8 | int(b[1]))
	if n > len(b) {
		return nil, nil, fmt.Errorf("%d-byte value runs past the properties: %w", n-2, c.Malformed)
	}
	return b[2:n:n], b[n:], nil
}

// ValidString applies the protocol's rule for UTF-8 strings received.
func ValidString(b []byte) bool {
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// UserProperty returns the value of the first MQTT 5 user property named
// name in props (without their length), and whether there is one. Props
// it cannot read (not checked with CheckProps) have none.
func (c Codec) UserProperty(props []byte, name string) ([]byte, bool) {
	for b := props; len(b) > 0; {
		id := b[0]
		if int(id) >= len(propKinds) || propKinds[id].kind == 0 {
			return nil, false
		}
		b = b[1:]
		var err error
		switch propKinds[id].kind {
		case propByte:
			b, err = c.skip(b, 1)
		case propUint16:
			b, err = c.skip(b, 2)
		case propUint32:
			b, err = c.skip(b, 4)
		case propVarint:
			var n int
			if _, n, err = c.varint(b); err == nil {
				b = b[n:]
			}
		case propBinary, propString:
			_, b, err = c.prefixed(b)
		case propPair:
			var k, v []byte
			if k, b, err = c.prefixed(b); err == nil {
				v, b, err = c.prefixed(b)
			}
			if err == nil && string(k) == name {
				return v, true
			}
		}
		if err != nil {
			return nil, false
		}
	}
	return nil, false
}
