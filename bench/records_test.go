package bench

import (
	"encoding/binary"
	"testing"

	"github.com/sluice-io/sluice/bench/load"
)

// FuzzRecordTracker feeds a stream of fixed-size messages to the tracker
// cut at arbitrary places, and checks that it finds exactly the headers
// of the whole messages, with the same latencies as when the stream
// arrives in one piece.
func FuzzRecordTracker(f *testing.F) {
	f.Add(uint16(16), uint8(3), []byte{1, 2, 3})
	f.Add(uint16(17), uint8(10), []byte{0, 15, 16, 17, 255})
	f.Add(uint16(1024), uint8(2), []byte{200, 7})
	f.Fuzz(func(t *testing.T, size16 uint16, msgs uint8, cuts []byte) {
		size := load.TimestampSize + int(size16%2048)
		n := int(msgs)
		stream := make([]byte, n*size+int(size16%7)) // a torn last message too
		for i := range stream {
			stream[i] = byte(i * 31)
		}
		for m := range n {
			binary.LittleEndian.PutUint64(stream[m*size+load.SchedOff:], uint64(10_000+m*1000))
			binary.LittleEndian.PutUint64(stream[m*size+load.SentOff:], uint64(10_000+m*1000+int(cuts0(cuts))))
		}
		const now = 1 << 30
		var wantEng, wantE2E fakeRec
		whole := load.RecordTracker{Size: size}
		if got := whole.Feed(stream, now, &wantEng, &wantE2E); got != n+boolInt(len(stream)-n*size >= load.TimestampSize) {
			t.Fatalf("whole stream: %d headers, want %d", got, n)
		}
		tr := load.RecordTracker{Size: size}
		var eng, e2e fakeRec
		total := 0
		rest := stream
		for i := 0; len(rest) > 0; i++ {
			k := len(rest)
			if i < len(cuts) {
				k = min(k, int(cuts[i])+1)
			}
			total += tr.Feed(rest[:k], now, &eng, &e2e)
			rest = rest[k:]
		}
		if total != len(wantEng.vals) || len(eng.vals) != total || len(e2e.vals) != total {
			t.Fatalf("cut stream: %d headers (%d, %d recorded), want %d", total, len(eng.vals), len(e2e.vals), len(wantEng.vals))
		}
		for i := range n {
			if eng.vals[i] != wantEng.vals[i] || e2e.vals[i] != wantE2E.vals[i] {
				t.Fatalf("message %d: latencies %d/%d, want %d/%d", i, eng.vals[i], e2e.vals[i], wantEng.vals[i], wantE2E.vals[i])
			}
			if want := int64(now - 10_000 - i*1000); e2e.vals[i] != want {
				t.Fatalf("message %d: end-to-end %d, want %d", i, e2e.vals[i], want)
			}
		}
	})
}

func cuts0(cuts []byte) byte {
	if len(cuts) == 0 {
		return 0
	}
	return cuts[0]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
