package bench

import "encoding/binary"

// TimestampSize is the length of the send timestamp at the start of every
// generated message: the sender's time.Now().UnixNano(), little-endian.
// Both processes run on one machine and read the same clock.
const TimestampSize = 8

// recorder receives one latency, in nanoseconds.
// *hdrhistogram.Histogram satisfies it through RecordValue.
type recorder interface{ RecordValue(v int64) error }

// recordTracker finds the timestamps in one source's byte stream of
// fixed-size messages, whatever the chunk boundaries: a stream is a
// sequence of size-byte messages, each starting with TimestampSize bytes
// of timestamp, so the position within the current message is all the
// state it needs, plus the timestamp bytes seen so far when a chunk ends
// inside one. Not safe for concurrent use; a source's chunks arrive in
// order on one goroutine.
type recordTracker struct {
	size int // message size; at least TimestampSize
	pos  int // offset within the current message
	ts   [TimestampSize]byte
}

// feed consumes p, and for every timestamp completed in it records
// now - timestamp, clamped into [0, histMax] so that a clock step neither
// drops a record nor makes the histogram build an error. It returns the
// number of timestamps.
func (t *recordTracker) feed(p []byte, now int64, r recorder) int {
	n := 0
	for len(p) > 0 {
		if t.pos == 0 && len(p) >= t.size {
			// Fast path: a whole message lies in p.
			ts := int64(binary.LittleEndian.Uint64(p))
			r.RecordValue(min(max(now-ts, 0), histMax))
			n++
			p = p[t.size:]
			continue
		}
		if t.pos < TimestampSize {
			c := copy(t.ts[t.pos:], p)
			t.pos += c
			p = p[c:]
			if t.pos == TimestampSize {
				ts := int64(binary.LittleEndian.Uint64(t.ts[:]))
				r.RecordValue(min(max(now-ts, 0), histMax))
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
