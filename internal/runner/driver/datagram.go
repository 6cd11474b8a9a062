package driver

import (
	"encoding/binary"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// A lane of datagrams fills its buffer as srcs's datagram framing says
// (see srcs.ForEachDatagram): each receive goes to
// buf[n+srcs.DatagramHeaderLen:] and its length prefix, known only once
// it arrived, to buf[n:n+srcs.DatagramHeaderLen]. A receive never starts
// with less room than DatagramLimit; when less is left, the buffer is
// emitted (Partial unless exactly full) and the next receive goes to a new
// one. Datagrams longer than the room a receive was given are dropped
// (contract.DatagramDropReporter), never split.

// DatagramLimit returns the room a runner reserves for each receive into a
// buffer of bufSize bytes from src: the source's MaxDatagram
// (srcs.MaxUDPPayload when it states none), capped by what fits in one
// buffer after a header.
func DatagramLimit(src contract.Source, bufSize int) int {
	limit := srcs.MaxUDPPayload
	if s, ok := src.(contract.DatagramSizer); ok {
		limit = s.MaxDatagram()
	}
	return max(1, min(limit, bufSize-srcs.DatagramHeaderLen))
}

// DatagramSpace returns the payload room left in buf after n bytes of
// framed datagrams and the next header: len(buf)-n-srcs.DatagramHeaderLen,
// or 0.
func DatagramSpace(buf []byte, n int) int {
	return max(0, len(buf)-n-srcs.DatagramHeaderLen)
}

// PutDatagramHeader writes the length prefix of a size-byte datagram at
// b[:srcs.DatagramHeaderLen].
func PutDatagramHeader(b []byte, size int) {
	binary.LittleEndian.PutUint32(b[:srcs.DatagramHeaderLen], uint32(size))
}

// AppendDatagram appends payload to dst, framed as a runner frames it.
func AppendDatagram(dst, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}
