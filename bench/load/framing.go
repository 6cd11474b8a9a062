package load

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/sluice-io/sluice/srcs"
)

// Framing in the bench: `sink --framing` and `run --framing` give the
// engine's listeners a srcs.Framer, so every connection is delivered in
// whole records, and the collector counts them (srcs.CountRecords on each
// chunk with the Records flag). `run --framing` also makes the generator
// send each --msg-size message as one record in that format. A framed
// message has no room for the generator's timestamps (a stamp could hold a
// '\n' or break a length field), so framed runs measure no latency; the
// CRC-32C of every stream is checked as in a raw run, and each stream's
// record count against the bytes the generator sent.
//
// Rejected: stamping timestamps into a framed message's payload. The
// payload's bytes would then depend on time, a newline record would need
// its stamp escaped, and the figure the framing benchmark is for, CPU per
// GiB of records, does not need latency.

// mqttTopic is the topic of the generator's MQTT PUBLISH packets.
const mqttTopic = "sb"

// FrameMessage turns msg, a generated message, into one record of the same
// length for f: the framer's header (or the newline) replaces bytes at its
// start (or end), and the payload's other bytes stay. A newline record's
// payload has its '\n' bytes replaced. It fails when no record of
// len(msg) bytes exists in f's format (a length that does not fit a
// 1-byte prefix, a message too short for its header); f's maximum is not
// checked here (see CheckRecord).
func FrameMessage(f srcs.Framer, msg []byte) error {
	n := len(msg)
	switch f := f.(type) {
	case srcs.Newline:
		if n < 1 {
			return errors.New("a newline record needs 1 byte")
		}
		for i, b := range msg[:n-1] {
			if b == '\n' {
				msg[i] = '\n' + 1
			}
		}
		msg[n-1] = '\n'
	case srcs.LengthPrefix:
		v := uint64(n - f.Size)
		if n < f.Size || (f.Size < 8 && v >= 1<<(8*f.Size)) {
			return fmt.Errorf("a %d-byte record does not fit a %d-byte length prefix", n, f.Size)
		}
		switch f.Size {
		case 1:
			msg[0] = byte(v)
		case 2:
			f.Order.PutUint16(msg, uint16(v))
		case 4:
			f.Order.PutUint32(msg, uint32(v))
		case 8:
			f.Order.PutUint64(msg, v)
		default:
			return fmt.Errorf("length prefix of %d bytes", f.Size)
		}
	case srcs.OctetCounting:
		// "LEN SP MSG": the digits count themselves out of n.
		for d := 1; d <= srcs.MaxOctetDigits; d++ {
			l := n - d - 1
			if l >= 1 && len(strconv.Itoa(l)) == d {
				copy(msg, strconv.Itoa(l)+" ")
				return nil
			}
		}
		return fmt.Errorf("no octet-counted record is %d bytes long", n)
	case srcs.MQTTPackets:
		// A QoS 0 PUBLISH: fixed header, topic length and topic, payload.
		for l := 1; l <= 4; l++ {
			rem := n - 1 - l
			if rem < 2+len(mqttTopic) || varintLen(rem) != l {
				continue
			}
			msg[0] = 0x30
			i := 1
			for v := rem; ; v >>= 7 {
				if v < 0x80 {
					msg[i] = byte(v)
					break
				}
				msg[i] = byte(v&0x7f | 0x80)
				i++
			}
			binary.BigEndian.PutUint16(msg[1+l:], uint16(len(mqttTopic)))
			copy(msg[3+l:], mqttTopic)
			return nil
		}
		// Around a remaining length of 128 or 16,384 a size is skipped:
		// one more length byte outgrows the packet it would carry. A
		// padded (non-minimal) length would fit, but MQTT 5 forbids it.
		return fmt.Errorf("no MQTT PUBLISH packet is %d bytes long (try %d)", n, n+1)
	default:
		return fmt.Errorf("the generator cannot encode %s records", f)
	}
	return nil
}

// varintLen is the length of v as an MQTT variable byte integer.
func varintLen(v int) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// CheckRecord says whether a size-byte record can travel through f with
// buffers of bufSize bytes (0: no buffer limit): f must encode it, take it
// whole, and not find it too long.
func CheckRecord(f srcs.Framer, size, bufSize int) error {
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if err := FrameMessage(f, msg); err != nil {
		return err
	}
	if bufSize <= 0 {
		bufSize = math.MaxInt32
	}
	k, err := f.Next(msg, 0, bufSize)
	switch {
	case err != nil:
		return err
	case k != size:
		return fmt.Errorf("the framer reads a %d-byte record as %d bytes", size, k)
	}
	return nil
}
