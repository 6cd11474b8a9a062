package driver

import (
	"encoding/binary"
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
	rt "github.com/sluice-io/sluice/internal/testkit/recordtest"
	"github.com/sluice-io/sluice/srcs"
)

// The framing benchmarks feed a 4 MiB stream of 1 KiB records through
// frames the way a Lane does: 16 KiB reads into 64 KiB buffers, Scan
// after every read, and at a full buffer the tail carried into the other
// of two buffers (the emit itself costs nothing here). Records are 1 KiB
// of payload plus their framing, so buffer ends fall inside records and
// every full buffer carries a tail. BenchmarkFramesRaw does the same
// reads and buffer changes without a framer: the difference per byte is
// the framing's cost.

const (
	benchBuf    = 64 << 10
	benchRead   = 16 << 10
	benchStream = 4 << 20
	benchRecord = 1 << 10
)

// benchStreamOf repeats rec, made of seed i by mk, up to benchStream bytes.
func benchStreamOf(mk func(i int) []byte) []byte {
	var s []byte
	for i := 0; len(s) < benchStream; i++ {
		s = append(s, mk(i)...)
	}
	return s
}

func benchFrames(b *testing.B, f srcs.Framer, stream []byte) {
	benchFramesReads(b, f, stream, benchRead)
}

func benchFramesReads(b *testing.B, f srcs.Framer, stream []byte, read int) {
	records, _, err := srcs.CountRecords(f, stream)
	if err != nil {
		b.Fatal(err)
	}
	l := &contract.Lane{Framer: f, Out: &recorder{}}
	bufs := [2][]byte{make([]byte, benchBuf), make([]byte, benchBuf)}
	var fr frames
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		fr.Reset(l)
		cur, n := 0, 0
		for off := 0; off < len(stream); {
			k := copy(bufs[cur][n:min(n+read, benchBuf)], stream[off:])
			off += k
			n, err = fr.Scan(bufs[cur], n+k)
			if err != nil {
				b.Fatal(err)
			}
			if n == benchBuf {
				n = fr.Carry(bufs[cur^1], bufs[cur], n)
				cur ^= 1
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(records), "ns/record")
}

// BenchmarkFramesRaw is the baseline: the reads and buffer changes of the
// framed benchmarks, without framing.
func BenchmarkFramesRaw(b *testing.B) {
	stream := benchStreamOf(func(i int) []byte { return rt.Line(benchRecord, byte(i)) })
	bufs := [2][]byte{make([]byte, benchBuf), make([]byte, benchBuf)}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		cur, n := 0, 0
		for off := 0; off < len(stream); {
			k := copy(bufs[cur][n:min(n+benchRead, benchBuf)], stream[off:])
			off += k
			n += k
			if n == benchBuf {
				cur, n = cur^1, 0
			}
		}
	}
}

func BenchmarkFramesNewline1KiB(b *testing.B) {
	benchFrames(b, srcs.Newline{}, benchStreamOf(func(i int) []byte { return rt.Line(benchRecord, byte(i)) }))
}

func BenchmarkFramesLength4(b *testing.B) {
	be := binary.BigEndian
	benchFrames(b, srcs.LengthPrefix{Size: 4, Order: be}, benchStreamOf(func(i int) []byte { return rt.LenRec(4, be, benchRecord, byte(i)) }))
}

func BenchmarkFramesOctet(b *testing.B) {
	benchFrames(b, srcs.OctetCounting{}, benchStreamOf(func(i int) []byte { return rt.Octet(benchRecord, byte(i)) }))
}

func BenchmarkFramesMQTT(b *testing.B) {
	benchFrames(b, srcs.MQTTPackets{}, benchStreamOf(func(i int) []byte { return rt.MQTTPkt(0x30, benchRecord, byte(i)) }))
}

// BenchmarkFramesNewlineSmallReads frames the newline stream in 1500-byte
// reads, so that most reads end inside a line and seen spares Newline a
// rescan of its beginning.
func BenchmarkFramesNewlineSmallReads(b *testing.B) {
	benchFramesReads(b, srcs.Newline{}, benchStreamOf(func(i int) []byte { return rt.Line(benchRecord, byte(i)) }), 1500)
}

// BenchmarkFramesNewline128 frames 128-byte lines, the size of many log
// lines, where finding each line's end costs more than the line's bytes.
func BenchmarkFramesNewline128(b *testing.B) {
	benchFrames(b, srcs.Newline{}, benchStreamOf(func(i int) []byte { return rt.Line(128, byte(i)) }))
}

// BenchmarkFramesNewline128Max frames the same lines with a maximum line
// length shorter than a buffer, which bounds how far Newline.Whole may
// step at once.
func BenchmarkFramesNewline128Max(b *testing.B) {
	benchFrames(b, srcs.Newline{Max: 4096}, benchStreamOf(func(i int) []byte { return rt.Line(128, byte(i)) }))
}
