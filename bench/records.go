package bench

import (
	"encoding/binary"

	"github.com/sluice-io/sluice/bench/report"
)

// TimestampSize is the length of the header at the start of every
// generated message: two little-endian UnixNano times, the message's
// scheduled send time, then the time the generator actually wrote it
// (stamped just before the write system call; the messages of one write
// share a stamp). Both processes run on one machine and read the same
// clock. Unpaced messages are scheduled when they are written.
const TimestampSize = 16

// Offsets of the two stamps in a message header.
const (
	schedOff = 0
	sentOff  = 8
)

// recorder receives one latency, in nanoseconds.
// *hdrhistogram.Histogram satisfies it through RecordValue.
type recorder interface{ RecordValue(v int64) error }

// recordTracker finds the headers in one source's byte stream of
// fixed-size messages, whatever the chunk boundaries: a stream is a
// sequence of size-byte messages, each starting with TimestampSize bytes
// of header, so the position within the current message is all the state
// it needs, plus the header bytes seen so far when a chunk ends inside
// one. Not safe for concurrent use; a source's chunks arrive in order on
// one goroutine.
type recordTracker struct {
	size int // message size; at least TimestampSize
	pos  int // offset within the current message
	hdr  [TimestampSize]byte
}

// clampLat keeps a latency within the histograms' range, so that a clock
// step neither drops a record nor makes the histogram return an error.
func clampLat(v int64) int64 { return min(max(v, 0), report.HistMax) }

// feed consumes p, and for every header completed in it records the
// engine latency now - sent into eng and the end-to-end latency
// now - scheduled into e2e. It returns the number of headers.
func (t *recordTracker) feed(p []byte, now int64, eng, e2e recorder) int {
	n := 0
	for len(p) > 0 {
		if t.pos == 0 && len(p) >= t.size {
			// Fast path: a whole message lies in p.
			eng.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(p[sentOff:]))))
			e2e.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(p[schedOff:]))))
			n++
			p = p[t.size:]
			continue
		}
		if t.pos < TimestampSize {
			c := copy(t.hdr[t.pos:], p)
			t.pos += c
			p = p[c:]
			if t.pos == TimestampSize {
				eng.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(t.hdr[sentOff:]))))
				e2e.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(t.hdr[schedOff:]))))
				n++
			}
		} else {
			skip := min(t.size-t.pos, len(p))
			t.pos += skip
			p = p[skip:]
		}
		if t.pos == t.size {
			t.pos = 0
		}
	}
	return n
}
