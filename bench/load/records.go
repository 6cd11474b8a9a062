package load

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
	SchedOff = 0
	SentOff  = 8
)

// recorder receives one latency, in nanoseconds.
// *hdrhistogram.Histogram satisfies it through RecordValue.
type recorder interface{ RecordValue(v int64) error }

// RecordTracker finds the headers in one source's byte stream of
// fixed-size messages, whatever the chunk boundaries: a stream is a
// sequence of size-byte messages, each starting with TimestampSize bytes
// of header, so the position within the current message is all the state
// it needs, plus the header bytes seen so far when a chunk ends inside
// one. Not safe for concurrent use; a source's chunks arrive in order on
// one goroutine.
type RecordTracker struct {
	Size int // message size; at least TimestampSize
	Pos  int // offset within the current message
	hdr  [TimestampSize]byte
}

// clampLat keeps a latency within the histograms' range, so that a clock
// step neither drops a record nor makes the histogram return an error.
func clampLat(v int64) int64 { return min(max(v, 0), report.HistMax) }

// Feed consumes p, and for every header completed in it records the
// engine latency now - sent into eng and the end-to-end latency
// now - scheduled into e2e. It returns the number of headers.
func (t *RecordTracker) Feed(p []byte, now int64, eng, e2e recorder) int {
	n := 0
	for len(p) > 0 {
		if t.Pos == 0 && len(p) >= t.Size {
			// Fast path: a whole message lies in p.
			eng.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(p[SentOff:]))))
			e2e.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(p[SchedOff:]))))
			n++
			p = p[t.Size:]
			continue
		}
		if t.Pos < TimestampSize {
			c := copy(t.hdr[t.Pos:], p)
			t.Pos += c
			p = p[c:]
			if t.Pos == TimestampSize {
				eng.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(t.hdr[SentOff:]))))
				e2e.RecordValue(clampLat(now - int64(binary.LittleEndian.Uint64(t.hdr[SchedOff:]))))
				n++
			}
		} else {
			skip := min(t.Size-t.Pos, len(p))
			t.Pos += skip
			p = p[skip:]
		}
		if t.Pos == t.Size {
			t.Pos = 0
		}
	}
	return n
}
