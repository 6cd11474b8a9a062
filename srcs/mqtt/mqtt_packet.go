package mqtt

import (
	"fmt"
	"io"
	"math"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sluice-io/sluice/internal/wire/mqtt"
	"github.com/sluice-io/sluice/srcs"
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
// send a subscriber: the SUBACK, PINGRESPs, PUBRELs at QoS 2, and an MQTT
// 5 DISCONNECT. The
// framer has checked every packet a chunk holds (see MQTT.Framer), so a
// consumer only has to take the messages out: ForEachMQTTMessage does, and
// skips the rest. A message never spans two chunks.

// mqttCodec decodes MQTT packets; its errors wrap srcs.ErrMalformed.
func mqttCodec() mqtt.Codec { return mqtt.Codec{Malformed: srcs.ErrMalformed} }

const (
	// mqttOverhead bounds what a PUBLISH carries besides its payload in
	// practice: a 64 KiB topic and as much again for v5 properties.
	mqttOverhead = 2 + math.MaxUint16 + 2 + 64<<10
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
	// Dup marks a QoS 1 or 2 message the broker may have delivered
	// before.
	Dup bool
	// ID is the broker's packet identifier of a QoS 1 or 2 message, 0 at
	// QoS 0. The broker reuses an identifier once the message is
	// acknowledged, so it names a message only while it is in flight.
	ID uint16

	props []byte // MQTT 5 properties, without their length
}

// UserProperty returns the value of the message's first MQTT 5 user
// property named name, and whether it has one: a key a producer may put
// in its messages. An MQTT 3.1.1 message has none.
func (m MQTTMessage) UserProperty(name string) ([]byte, bool) {
	return mqttCodec().UserProperty(m.props, name)
}

// ForEachMQTTMessage calls fn with each PUBLISH in data, in order, and skips
// the control packets between them. data must start at a packet boundary:
// the Data of a chunk with the Records flag from an MQTT source (or from any
// lane framed with MQTTPackets). version is the protocol level the packets
// were sent with, 4 or 5 (0 means 4, as in MQTTConfig); MQTT 5 properties
// are read by MQTTMessage.UserProperty. It allocates nothing.
//
// An error from fn stops the walk and is returned as it is. A packet that
// cannot be decoded returns an error wrapping srcs.ErrMalformed, and data that
// ends inside a packet (the tail of a chunk with the Truncated flag) one
// wrapping io.ErrUnexpectedEOF, both after fn has seen the messages before
// it.
func ForEachMQTTMessage(data []byte, version byte, fn func(MQTTMessage) error) error {
	for off := 0; off < len(data); {
		hl, n, err := mqttCodec().PacketLen(data[off:])
		if err != nil {
			return fmt.Errorf("srcs: mqtt packet at offset %d: %w", off, err)
		}
		if n == 0 {
			return fmt.Errorf("srcs: mqtt packet at offset %d: %d bytes left, cut short: %w", off, len(data)-off, io.ErrUnexpectedEOF)
		}
		h := data[off]
		if h>>4 == packets.Publish {
			pub, err := mqttCodec().ParsePublish(h, data[off+hl:off+n], version)
			if err != nil {
				return fmt.Errorf("srcs: mqtt PUBLISH at offset %d: %w", off, err)
			}
			if err := fn(MQTTMessage{Topic: pub.Topic, Payload: pub.Payload, QoS: pub.QoS, Retain: h&1 != 0, Dup: h&8 != 0,
				ID: pub.ID, props: pub.Props}); err != nil {
				return err
			}
		}
		off += n
	}
	return nil
}

// mqttFramer frames an MQTT subscriber's stream into packets and checks
// each packet as it completes, so that a chunk holds only packets a broker
// may send this subscriber. It keeps no state of its own: what it checks
// against (the configuration, whether this session subscribed) lives in
// the source, so one framer serves every session of the source.
type mqttFramer struct {
	m  *MQTT
	pk srcs.MQTTPackets
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
		return fmt.Errorf("srcs: mqtt %s: PUBLISH with QoS 3 (header 0x%02x): %w", m.name, h, srcs.ErrMalformed)
	case t == packets.Publish && (h>>1)&3 > m.cfg.QoS:
		return fmt.Errorf("srcs: mqtt %s: QoS %d PUBLISH, above every subscription's QoS: %w", m.name, (h>>1)&3, srcs.ErrMalformed)
	case t == packets.Publish:
		return nil
	case t == packets.Pubrel && m.cfg.QoS == 2:
		if h&0x0f != 2 { // [MQTT-3.6.1-1]
			return fmt.Errorf("srcs: mqtt %s: PUBREL with flags 0x%x: %w", m.name, h&0x0f, srcs.ErrMalformed)
		}
		return nil
	case t == packets.Suback, t == packets.Pingresp, t == packets.Disconnect:
		if h&0x0f != 0 {
			return fmt.Errorf("srcs: mqtt %s: %s with reserved flags 0x%x: %w", m.name, packets.PacketNames[t], h&0x0f, srcs.ErrMalformed)
		}
		return nil
	}
	return fmt.Errorf("srcs: mqtt %s: unexpected %s packet (header 0x%02x): %w", m.name, packets.PacketNames[t], h, srcs.ErrMalformed)
}

// checkPacket checks a whole packet, whose header checkHeader passed. It
// must not change the source's state: the source counts what it delivers
// in Delivered.
func (m *MQTT) checkPacket(p []byte) error {
	hl, _, _ := mqttCodec().PacketLen(p) // the framer parsed it
	h, body := p[0], p[hl:]
	v := m.cfg.Version
	switch h >> 4 {
	case packets.Publish:
		pub, err := mqttCodec().ParsePublish(h, body, v)
		if err == nil && v == 5 {
			_, err = mqttCodec().CheckProps(pub.Props, packets.Publish)
		}
		switch {
		case err != nil:
		case len(pub.Topic) == 0:
			// A topic alias: this client never allows the broker any.
			err = fmt.Errorf("empty topic name: %w", srcs.ErrMalformed)
		case !mqtt.ValidString(pub.Topic):
			err = fmt.Errorf("topic name is not valid UTF-8: %w", srcs.ErrMalformed)
		case pub.QoS > 0 && pub.ID == 0:
			err = fmt.Errorf("QoS %d with packet id 0: %w", pub.QoS, srcs.ErrMalformed)
		case len(pub.Payload) > m.cfg.MaxMessage:
			return &srcs.RecordError{Framer: m.framer.String(), Size: int64(len(p)), Max: len(p) - len(pub.Payload) + m.cfg.MaxMessage, Also: srcs.ErrTooLarge}
		}
		if err != nil {
			return fmt.Errorf("srcs: mqtt %s: PUBLISH: %w", m.name, err)
		}
	case packets.Suback:
		return m.checkSuback(body)
	case packets.Pingresp:
		if len(body) != 0 {
			return fmt.Errorf("srcs: mqtt %s: PINGRESP with a %d-byte body: %w", m.name, len(body), srcs.ErrMalformed)
		}
	case packets.Pubrel:
		if len(body) < 2 || (m.cfg.Version != 5 && len(body) != 2) {
			return fmt.Errorf("srcs: mqtt %s: PUBREL of %d bytes: %w", m.name, len(body), srcs.ErrMalformed)
		}
	case packets.Disconnect:
		return m.checkDisconnect(body)
	}
	return nil
}

// checkSuback checks the SUBACK against the SUBSCRIBE this session sent.
func (m *MQTT) checkSuback(body []byte) error {
	if !m.subSent.Load() {
		return fmt.Errorf("srcs: mqtt %s: SUBACK, but this session sent no SUBSCRIBE: %w", m.name, srcs.ErrMalformed)
	}
	malformed := func(err error) error {
		return &MQTTSubscribeError{Broker: m.cfg.Broker, Reason: "malformed SUBACK", Err: err}
	}
	if len(body) < 2 {
		return malformed(fmt.Errorf("%d-byte SUBACK has no packet id: %w", len(body), srcs.ErrMalformed))
	}
	id, codes := uint16(body[0])<<8|uint16(body[1]), body[2:]
	var reason []byte
	if m.cfg.Version == 5 {
		props, rest, err := mqttCodec().Props(codes)
		if err == nil {
			reason, err = mqttCodec().CheckProps(props, packets.Suback)
		}
		if err != nil {
			return malformed(err)
		}
		codes = rest
	}
	if id != mqttSubID || len(codes) != len(m.cfg.Topics) {
		return &MQTTSubscribeError{Broker: m.cfg.Broker,
			Reason: fmt.Sprintf("SUBACK for packet %d with %d codes, want packet %d with %d", id, len(codes), mqttSubID, len(m.cfg.Topics)),
			Err:    srcs.ErrMalformed}
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
		return fmt.Errorf("srcs: mqtt %s: DISCONNECT with a %d-byte body: %w", m.name, len(body), srcs.ErrMalformed)
	}
	code := body[0]
	var reason []byte
	if len(body) > 1 {
		props, rest, err := mqttCodec().Props(body[1:])
		if err == nil && len(rest) != 0 {
			err = fmt.Errorf("%d bytes after the properties: %w", len(rest), srcs.ErrMalformed)
		}
		if err == nil {
			reason, err = mqttCodec().CheckProps(props, packets.Disconnect)
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

var _ srcs.Framer = (*mqttFramer)(nil)
