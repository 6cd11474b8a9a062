package srcs

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// datagram (legal in UDP) is a bare zero prefix.
//
// The Partial flag means what it means for streams: the chunk was emitted
// with free space left in its buffer, too little for the next datagram.
// Datagrams longer than the room a receive was given are dropped (counted
// in engine.SourceStats), never split.
//
// ForEachDatagram decodes a chunk.

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
