package load

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench/report"
)

// fakeRec collects recorded values.
type fakeRec struct{ vals []int64 }

func (r *fakeRec) RecordValue(v int64) error {
	r.vals = append(r.vals, v)
	return nil
}

// stampedStream builds n messages of size bytes whose scheduled times are
// 1000, 2000, ... and whose send times are 500 ns later.
func stampedStream(n, size int) []byte {
	b := make([]byte, n*size)
	for i := range n {
		binary.LittleEndian.PutUint64(b[i*size+SchedOff:], uint64(1000*(i+1)))
		binary.LittleEndian.PutUint64(b[i*size+SentOff:], uint64(1000*(i+1)+500))
		for j := TimestampSize; j < size; j++ {
			b[i*size+j] = 0xEE // payload that must never be read as a timestamp
		}
	}
	return b
}

func TestRecordTrackerAcrossChunkBoundaries(t *testing.T) {
	const now = 1 << 30
	for _, size := range []int{16, 17, 24, 100, 4096} {
		stream := stampedStream(50, size)
		for _, split := range []string{"whole", "bytewise", "random"} {
			var chunks [][]byte
			switch split {
			case "whole":
				chunks = [][]byte{stream}
			case "bytewise":
				for i := range stream {
					chunks = append(chunks, stream[i:i+1])
				}
			case "random":
				rng := rand.New(rand.NewPCG(uint64(size), 7))
				for rest := stream; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(2*size))
					chunks, rest = append(chunks, rest[:n]), rest[n:]
				}
			}
			tr := RecordTracker{Size: size}
			var rec, e2e fakeRec
			total := 0
			for _, c := range chunks {
				total += tr.Feed(c, now, &rec, &e2e)
			}
			if total != 50 || len(rec.vals) != 50 || len(e2e.vals) != 50 {
				t.Fatalf("size %d, %s: %d headers (%d, %d recorded), want 50", size, split, total, len(rec.vals), len(e2e.vals))
			}
			for i := range rec.vals {
				if want := int64(now - 1000*(i+1) - 500); rec.vals[i] != want {
					t.Fatalf("size %d, %s: engine latency %d = %d, want %d", size, split, i, rec.vals[i], want)
				}
				if want := int64(now - 1000*(i+1)); e2e.vals[i] != want {
					t.Fatalf("size %d, %s: end-to-end latency %d = %d, want %d", size, split, i, e2e.vals[i], want)
				}
			}
			if tr.Pos != 0 {
				t.Errorf("size %d, %s: tracker ends at offset %d, want 0", size, split, tr.Pos)
			}
		}
	}
}

func TestRecordTrackerClampsFutureTimestamps(t *testing.T) {
	tr := RecordTracker{Size: 16}
	var rec, e2e fakeRec
	tr.Feed(stampedStream(1, 16), 0, &rec, &e2e) // stamped 1000ns "in the future"
	if len(rec.vals) != 1 || rec.vals[0] != 0 || len(e2e.vals) != 1 || e2e.vals[0] != 0 {
		t.Errorf("recorded %v and %v, want [0] and [0]", rec.vals, e2e.vals)
	}
}

func BenchmarkRecordTracker(b *testing.B) {
	for _, size := range []int{64, 1024, 16 << 10} {
		b.Run(report.FormatBytes(uint64(size)), func(b *testing.B) {
			chunk := stampedStream((64<<10)/size, size)
			h, h2 := report.NewHist(), report.NewHist()
			tr := RecordTracker{Size: size}
			now := time.Now().UnixNano()
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			for b.Loop() {
				tr.Feed(chunk[:len(chunk)/3], now, h, h2)
				tr.Feed(chunk[len(chunk)/3:], now, h, h2)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunk)/size), "ns/record")
		})
	}
}

func TestRecordTrackerAllocs(t *testing.T) {
	chunk := stampedStream(64, 1024)
	h, h2 := report.NewHist(), report.NewHist()
	tr := RecordTracker{Size: 1024}
	if n := testing.AllocsPerRun(100, func() { tr.Feed(chunk[5:], 1<<30, h, h2) }); n != 0 {
		t.Errorf("feed allocates %v times per chunk, want 0", n)
	}
}

// FuzzRecordTracker feeds a stream of fixed-size messages to the tracker
// cut at arbitrary places, and checks that it finds exactly the headers
// of the whole messages, with the same latencies as when the stream
// arrives in one piece.
func FuzzRecordTracker(f *testing.F) {
	f.Add(uint16(16), uint8(3), []byte{1, 2, 3})
	f.Add(uint16(17), uint8(10), []byte{0, 15, 16, 17, 255})
	f.Add(uint16(1024), uint8(2), []byte{200, 7})
	f.Fuzz(func(t *testing.T, size16 uint16, msgs uint8, cuts []byte) {
		size := TimestampSize + int(size16%2048)
		n := int(msgs)
		stream := make([]byte, n*size+int(size16%7)) // a torn last message too
		for i := range stream {
			stream[i] = byte(i * 31)
		}
		for m := range n {
			binary.LittleEndian.PutUint64(stream[m*size+SchedOff:], uint64(10_000+m*1000))
			binary.LittleEndian.PutUint64(stream[m*size+SentOff:], uint64(10_000+m*1000+int(cuts0(cuts))))
		}
		const now = 1 << 30
		var wantEng, wantE2E fakeRec
		whole := RecordTracker{Size: size}
		if got := whole.Feed(stream, now, &wantEng, &wantE2E); got != n+boolInt(len(stream)-n*size >= TimestampSize) {
			t.Fatalf("whole stream: %d headers, want %d", got, n)
		}
		tr := RecordTracker{Size: size}
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
