package srcs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/mochi-mqtt/server/v2/packets"
)

// The MQTT subscriber's byte stream.
//
// An MQTT source does not deliver one message per chunk: chunks are filled
// by a runner that knows nothing of MQTT. Its Read writes every PUBLISH it
// receives as one frame into a continuous byte stream:
//
//	frame   = length topic-length topic payload
//	length  = uint32, little-endian: the bytes after it (2 + T + payload)
//	topic-length = uint16, big-endian: T, the topic's length in bytes
//	topic   = T bytes, the topic name (UTF-8, as the broker sent it)
//	payload = the rest of the frame, the message's application payload
//
// Frames follow one another with nothing in between, and a frame may be
// split across Read calls and hence across chunks: a chunk can begin or end
// in the middle of a frame. A source's chunks arrive in order (Seq), so a
// consumer feeds each chunk's Data to a FrameReader and takes whole
// messages out of it. Reconnects do not break the framing: a session only
// ends between frames. Only when the source is stopped (StopSource,
// Shutdown) can its stream end inside a frame; that message was never
// acknowledged, and FrameReader.Buffered reports the leftover bytes.

// MQTTFrameHeaderLen is the length prefix of a frame.
const MQTTFrameHeaderLen = 4

// ErrMalformed marks bytes that break a protocol or a framing: an MQTT
// packet the broker should not have sent (undecodable, or unexpected in
// its place), or a frame stream that FrameReader cannot parse.
var ErrMalformed = errors.New("srcs: malformed input")

// ErrTooLarge marks an MQTT message larger than the configured MaxMessage.
var ErrTooLarge = errors.New("srcs: message too large")

// mqttFrameLen returns the length of a frame's body: what its prefix says.
func mqttFrameLen(topic, payload int) int { return 2 + topic + payload }

// appendFrameHeader appends the prefix of a frame, up to and including the
// topic; the payload follows it in the stream.
func appendFrameHeader(dst []byte, topic string, payload int) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(mqttFrameLen(len(topic), payload)))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(topic)))
	return append(dst, topic...)
}

// AppendMQTTFrame appends one message, framed as an MQTT source frames it,
// to dst and returns the extended slice. The topic must be at most 65535
// bytes long and the frame must fit the uint32 prefix.
func AppendMQTTFrame(dst []byte, topic string, payload []byte) []byte {
	return append(appendFrameHeader(dst, topic, len(payload)), payload...)
}

// MQTTMessage is one message taken out of a frame stream. Its slices alias
// the FrameReader's buffer and stay valid until the next call to Write or
// Next on that reader.
type MQTTMessage struct {
	Topic   []byte
	Payload []byte
}

// FrameReader reassembles the messages of one MQTT source from the data of
// its chunks, in their order. Write copies the data, so a chunk may be
// released as soon as Write returns; Next returns the whole messages
// written so far. The zero value is ready to use.
//
// A FrameReader serves one source and is not safe for concurrent use.
type FrameReader struct {
	// MaxMessage bounds a payload, as MQTTConfig.MaxMessage does; a frame
	// that claims more is malformed. Zero means DefaultMQTTMaxMessage.
	MaxMessage int

	buf []byte
	off int   // start of the first frame not yet returned
	err error // sticky: a malformed stream cannot be resynchronised
}

// Write appends stream data. It never fails: malformed frames are reported
// by Next.
func (r *FrameReader) Write(p []byte) (int, error) {
	if r.off > 0 && r.off >= len(r.buf)/2 {
		// Slide the unread tail down rather than grow without bound.
		r.buf = r.buf[:copy(r.buf, r.buf[r.off:])]
		r.off = 0
	}
	r.buf = append(r.buf, p...)
	return len(p), nil
}

// Next returns the next whole message. ok is false when the bytes written
// so far end before the next frame does (write more, then call again). An
// error wraps ErrMalformed, and every later call returns it too: once a
// length is wrong, no later frame boundary can be trusted.
func (r *FrameReader) Next() (m MQTTMessage, ok bool, err error) {
	if r.err != nil {
		return MQTTMessage{}, false, r.err
	}
	rest := r.buf[r.off:]
	if len(rest) < MQTTFrameHeaderLen+2 {
		return MQTTMessage{}, false, nil
	}
	maxMsg := r.MaxMessage
	if maxMsg <= 0 {
		maxMsg = DefaultMQTTMaxMessage
	}
	l := binary.LittleEndian.Uint32(rest)
	t := int(binary.BigEndian.Uint16(rest[MQTTFrameHeaderLen:]))
	switch {
	case l < 2 || int(l)-2 < t:
		r.err = fmt.Errorf("srcs: mqtt frame at stream offset +%d: length %d cannot hold a %d-byte topic: %w", r.off, l, t, ErrMalformed)
	case uint64(l) > uint64(mqttFrameLen(t, maxMsg)):
		r.err = fmt.Errorf("srcs: mqtt frame at stream offset +%d: length %d exceeds MaxMessage %d: %w", r.off, l, maxMsg, ErrMalformed)
	}
	if r.err != nil {
		return MQTTMessage{}, false, r.err
	}
	end := MQTTFrameHeaderLen + int(l)
	if len(rest) < end {
		return MQTTMessage{}, false, nil
	}
	body := rest[MQTTFrameHeaderLen+2 : end]
	r.off += end
	return MQTTMessage{Topic: body[:t:t], Payload: body[t:]}, true, nil
}

// Buffered returns the number of bytes written but not yet returned as
// messages: the start of an unfinished frame. At a source's end of stream
// a non-zero value means the stream was cut inside a frame.
func (r *FrameReader) Buffered() int { return len(r.buf) - r.off }

// mqttReader assembles MQTT control packets from a broker's byte stream,
// decoding them with mochi-mqtt's packets codec. It is resumable: when a
// read fails (a deadline set to flush a chunk, say) the packet read so far
// is kept, and the next call continues it. Not safe for concurrent use.
type mqttReader struct {
	br      *bufio.Reader
	version byte // 4 or 5: decodes version-dependent fields
	limit   int  // largest remaining length accepted
	maxMsg  int  // largest payload accepted

	hdr  [5]byte // type byte and up to 4 bytes of remaining length
	hdrN int
	rem  int // remaining length; -1 until the fixed header is complete
	body []byte
	got  int // bytes of body read
}

func newMQTTReader(rd io.Reader, version byte, maxMsg int) *mqttReader {
	return &mqttReader{
		br: bufio.NewReaderSize(rd, 16<<10), version: version, maxMsg: maxMsg,
		// Room for the largest topic, a packet id and generous properties
		// besides the payload; the exact payload check follows decoding.
		limit: min(maxMsg+mqttOverhead, mqttMaxRemaining),
		rem:   -1,
	}
}

const (
	// mqttOverhead bounds what a PUBLISH carries besides its payload in
	// practice: a 64 KiB topic and as much again for v5 properties.
	mqttOverhead = 2 + math.MaxUint16 + 2 + 64<<10
	// mqttMaxRemaining is the protocol's largest remaining length.
	mqttMaxRemaining = 268435455
)

// next returns the next whole packet. With block false it consumes only
// bytes already buffered, and returns ok false when they run out first; with
// block true it reads the connection as needed. A PUBLISH's TopicName and
// Payload alias the reader's memory until the next call.
//
// I/O errors come back as they are, except that the end of the stream
// inside a packet is io.ErrUnexpectedEOF; decoding errors wrap
// ErrMalformed or ErrTooLarge.
func (r *mqttReader) next(block bool) (pk packets.Packet, ok bool, err error) {
	for r.rem < 0 {
		if !block && r.br.Buffered() == 0 {
			return pk, false, nil
		}
		b, err := r.br.ReadByte()
		if err != nil {
			return pk, false, r.ioErr(err)
		}
		r.hdr[r.hdrN] = b
		r.hdrN++
		switch {
		case r.hdrN == 1:
			// Reject garbage before waiting for a body it may never send.
			var fh packets.FixedHeader
			if err := fh.Decode(b); err != nil {
				return pk, false, r.fail(fmt.Errorf("fixed header 0x%02x: %w", b, err))
			}
		case b&0x80 == 0:
			n, _, err := packets.DecodeLength(bytes.NewReader(r.hdr[1:r.hdrN]))
			if err != nil {
				return pk, false, r.fail(fmt.Errorf("remaining length: %w", err))
			}
			if n > r.limit {
				return pk, false, r.reset(fmt.Errorf("a %d-byte packet exceeds MaxMessage %d: %w", n, r.maxMsg, ErrTooLarge))
			}
			r.rem = n
			if cap(r.body) < n {
				r.body = make([]byte, n)
			}
		case r.hdrN == len(r.hdr):
			return pk, false, r.fail(errors.New("remaining length longer than 4 bytes"))
		}
	}
	body := r.body[:r.rem]
	for r.got < r.rem {
		want := body[r.got:]
		if !block {
			if r.br.Buffered() == 0 {
				return pk, false, nil
			}
			want = want[:min(len(want), r.br.Buffered())]
		}
		n, err := r.br.Read(want)
		r.got += n
		if err != nil {
			return pk, false, r.ioErr(err)
		}
	}
	pk.ProtocolVersion = r.version
	hb := r.hdr[0]
	r.hdrN, r.rem, r.got = 0, -1, 0
	if err := pk.FixedHeader.Decode(hb); err != nil {
		return pk, false, r.fail(err) // checked above; kept for safety
	}
	pk.FixedHeader.Remaining = len(body)
	if err := decodeMQTT(&pk, body); err != nil {
		return pk, false, r.fail(fmt.Errorf("%s: %w", packets.PacketNames[pk.FixedHeader.Type], err))
	}
	if pk.FixedHeader.Type == packets.Publish && len(pk.Payload) > r.maxMsg {
		return pk, false, fmt.Errorf("a %d-byte message on %q exceeds MaxMessage %d: %w", len(pk.Payload), pk.TopicName, r.maxMsg, ErrTooLarge)
	}
	return pk, true, nil
}

// decodeMQTT decodes the body of a packet a client may receive, and checks
// what the codec leaves to its caller. Other packet types are returned
// undecoded, for the caller to reject.
func decodeMQTT(pk *packets.Packet, body []byte) error {
	var err error
	switch pk.FixedHeader.Type {
	case packets.Publish:
		if err = pk.PublishDecode(body); err != nil {
			return err
		}
		if pk.FixedHeader.Qos > 0 && pk.PacketID == 0 {
			return packets.ErrProtocolViolationNoPacketID
		}
		if pk.TopicName == "" {
			// A topic alias; we never allow the broker to use them.
			return packets.ErrProtocolViolationNoTopic
		}
	case packets.Connack:
		if len(body) < 2 {
			return packets.ErrMalformedReasonCode
		}
		err = pk.ConnackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Pingresp:
		if len(body) != 0 {
			return packets.ErrMalformedPacket
		}
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	}
	return err
}

// ioErr maps a read error, keeping the partial packet for a retry.
func (r *mqttReader) ioErr(err error) error {
	if errors.Is(err, io.EOF) && r.hdrN > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

// fail wraps a decoding error. The stream cannot be trusted after it; the
// session ends.
func (r *mqttReader) fail(err error) error {
	r.hdrN, r.rem, r.got = 0, -1, 0
	return fmt.Errorf("%w: %w", ErrMalformed, err)
}

// reset drops the packet in progress and returns err.
func (r *mqttReader) reset(err error) error {
	r.hdrN, r.rem, r.got = 0, -1, 0
	return err
}
