package srcs

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/internal/contract"
)

// Datagram framing.
//
// A chunk with the Datagrams flag holds whole datagrams, back to back, each
// prefixed by its length as a 4-byte little-endian uint32:
//
//	[len][payload][len][payload]...
//
// The chunk's length is exactly the sum of the prefixes and payloads: no
// padding, no trailer. A datagram never straddles two chunks, and an empty
// datagram (legal in UDP) is a bare zero prefix. Runners write the prefix
// after the datagram has arrived, since only then is its length known: each
// receive goes to buf[n+DatagramHeaderLen:] and its header to
// buf[n:n+DatagramHeaderLen].
//
// The Partial flag means what it means for streams: the chunk was emitted
// with free space left in its buffer. A runner never starts a receive with
// less room than DatagramLimit; when less is left, it emits the buffer
// (Partial unless exactly full) and receives into a new one. Datagrams longer
// than the room a receive was given are dropped (counted in engine.SourceStats),
// never split.
//
// ForEachDatagram decodes a chunk; AppendDatagram encodes one datagram.

const (
	// DatagramHeaderLen is the length prefix before every datagram.
	DatagramHeaderLen = 4
	// MaxUDPPayload is the largest payload of a UDP datagram over IPv4
	// (65535 minus the IPv4 and UDP headers). It is the default datagram
	// limit for sources that state none.
	MaxUDPPayload = 65507
)

var (
	// ErrMalformedDatagrams is wrapped by ForEachDatagram when a chunk is
	// not a sequence of whole framed datagrams.
	ErrMalformedDatagrams = errors.New("srcs: malformed datagram chunk")
	// ErrDatagramTooLarge is wrapped by datagram sources whose Read got a
	// datagram longer than the buffer it was given. The datagram is
	// discarded: the socket never returns its tail.
	ErrDatagramTooLarge = errors.New("srcs: datagram larger than the buffer")
)

// DatagramLimit returns the room a runner reserves for each receive into a
// buffer of bufSize bytes from src: the source's MaxDatagram (MaxUDPPayload
// when it states none), capped by what fits in one buffer after a header.
func DatagramLimit(src Source, bufSize int) int {
	limit := MaxUDPPayload
	if s, ok := src.(contract.DatagramSizer); ok {
		limit = s.MaxDatagram()
	}
	return max(1, min(limit, bufSize-DatagramHeaderLen))
}

// DatagramSpace returns the payload room left in buf after n bytes of
// framed datagrams and the next header: len(buf)-n-DatagramHeaderLen, or 0.
func DatagramSpace(buf []byte, n int) int {
	return max(0, len(buf)-n-DatagramHeaderLen)
}

// PutDatagramHeader writes the length prefix of a size-byte datagram at
// b[:DatagramHeaderLen].
func PutDatagramHeader(b []byte, size int) {
	binary.LittleEndian.PutUint32(b[:DatagramHeaderLen], uint32(size))
}

// AppendDatagram appends payload to dst, framed.
func AppendDatagram(dst, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// ForEachDatagram calls fn with each datagram of a chunk, in order, until fn
// returns false. The payloads alias data. It returns an error wrapping
// ErrMalformedDatagrams, after calling fn for the whole datagrams before it,
// when data ends inside a header or a payload.
func ForEachDatagram(data []byte, fn func(payload []byte) bool) error {
	for off := 0; off < len(data); {
		rest := len(data) - off
		if rest < DatagramHeaderLen {
			return fmt.Errorf("%w: %d bytes at offset %d are too short for a length prefix",
				ErrMalformedDatagrams, rest, off)
		}
		size := binary.LittleEndian.Uint32(data[off:])
		off += DatagramHeaderLen
		if uint64(size) > uint64(len(data)-off) {
			return fmt.Errorf("%w: datagram at offset %d claims %d bytes, %d remain",
				ErrMalformedDatagrams, off-DatagramHeaderLen, size, len(data)-off)
		}
		end := off + int(size)
		if !fn(data[off:end:end]) {
			return nil
		}
		off = end
	}
	return nil
}
