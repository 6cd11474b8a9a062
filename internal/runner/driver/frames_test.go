package driver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	rt "github.com/sluice-io/sluice/internal/testkit/recordtest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// The frames tests drive every framer through frames the way a Lane does
// (runFeed): reads of a chosen size into fixed-size buffers, Scan after
// every read, the whole records emitted and the tail carried into a fresh
// buffer. The stream fuzz targets compare what runFeed delivers with
// recordtest.Model, which runs the reference decoder over the whole
// stream.

func TestRecordFlags(t *testing.T) {
	if got := recordFlags(10, 10); got != srcs.Records {
		t.Errorf("RecordFlags(10, 10) = %v", got)
	}
	if got := recordFlags(0, 3); got != srcs.Records|srcs.Truncated {
		t.Errorf("RecordFlags(0, 3) = %v", got)
	}
	if got := recordFlags(4, 9).String(); got != "records|truncated" {
		t.Errorf("RecordFlags(4, 9) = %s", got)
	}
}

// recorder is the Emitter of the Frames tests: runFeed keeps the chunks
// itself, so Emit and Finish do nothing, and RecordSkipped keeps the
// reports.
type recorder struct {
	lane    *contract.Lane
	skipped []*srcs.RecordError
	bad     []string
}

func (r *recorder) Emit(*contract.Lane, *pool.Buf, int, srcs.Flags, time.Time) {}
func (r *recorder) Finish(*contract.Lane, error)                               {}

func (r *recorder) RecordSkipped(l *contract.Lane, e error) {
	err, ok := e.(*srcs.RecordError)
	if !ok {
		r.bad = append(r.bad, fmt.Sprintf("RecordSkipped(%v): not a *srcs.RecordError", e))
		return
	}
	if l != r.lane {
		r.bad = append(r.bad, fmt.Sprintf("RecordSkipped for lane %p, want %p", l, r.lane))
	}
	if err.Skip == 0 {
		r.bad = append(r.bad, fmt.Sprintf("RecordSkipped(%v) with Skip 0", err))
	}
	r.skipped = append(r.skipped, err)
}

var _ contract.RecordReporter = (*recorder)(nil)

// feed says how runFeed reads a stream.
type feed struct {
	buf   int   // the buffer size
	reads []int // read sizes, taken in turn; a read stops at a full buffer
	// eager emits the whole records after every read, as a lane whose
	// Flush is zero does; otherwise only full buffers are emitted.
	eager bool
}

func (c feed) String() string {
	return fmt.Sprintf("buf%d/reads%v/eager=%v", c.buf, c.reads, c.eager)
}

// fed is what runFeed saw.
type fed struct {
	out     []byte // the whole records of all chunks, in order
	tail    []byte // the bytes after them in the Truncated last chunk
	skipped []*srcs.RecordError
	err     error // what ended the lane early; nil when it read to the end
}

// runFeed reads stream through Frames as a runner does: each read fills
// the buffer's free space up to the next read size, Scan frames it, a full
// buffer (or, eager, any buffer with whole records) is emitted up to
// Done() after its tail is carried into a fresh buffer (or, when it has
// none, after Clear), and at the end of
// the stream what is left is emitted with RecordFlags. Fresh buffers are
// filled with 0xee, so bytes that Frames did not copy show up in the
// output. It checks the Frames contract along the way and that every
// chunk holds whole records only, except the Truncated last one.
func runFeed(tb testing.TB, f srcs.Framer, stream []byte, c feed) fed {
	tb.Helper()
	em := &recorder{}
	l := &contract.Lane{Framer: f, Out: em}
	em.lane = l
	var fr frames
	fr.Reset(l)
	if !fr.On() {
		tb.Fatalf("%s: Frames not on after Reset", f)
	}
	fresh := func() []byte { return bytes.Repeat([]byte{0xee}, c.buf) }
	var r fed
	emit := func(p []byte, flags srcs.Flags, done int) {
		if len(p) == 0 {
			tb.Fatalf("%s %s: empty emit", f, c)
		}
		if flags&srcs.Records == 0 || (flags&srcs.Truncated != 0) != (done < len(p)) {
			tb.Fatalf("%s %s: flags %v for %d bytes, %d whole", f, c, flags, len(p), done)
		}
		if k, n, err := srcs.CountRecords(f, p[:done]); n != done || err != nil {
			tb.Fatalf("%s %s: chunk of %d whole bytes holds %d records in %d bytes (%v): %q", f, c, done, k, n, err, p)
		}
		r.out = append(r.out, p[:done]...)
		r.tail = append(r.tail, p[done:]...)
	}
	check := func(n int) {
		if d := fr.Done(); d < 0 || d > n || n < 0 || n > c.buf {
			tb.Fatalf("%s %s: Done() = %d, n = %d, buffer %d", f, c, d, n, c.buf)
		}
	}
	buf, n := fresh(), 0
	for off, i := 0, 0; off < len(stream) && r.err == nil; i++ {
		k := min(c.reads[i%len(c.reads)], c.buf-n, len(stream)-off)
		if k <= 0 {
			tb.Fatalf("%s %s: read of %d bytes into %d of %d", f, c, k, n, c.buf)
		}
		n += copy(buf[n:], stream[off:off+k])
		off += k
		n, r.err = fr.Scan(buf, n)
		check(n)
		d := fr.Done()
		switch {
		case r.err != nil:
			// The bytes after Done() belong to the bad record.
			if d > 0 {
				emit(buf[:d], srcs.Records, d)
			}
		case n == c.buf || c.eager && d > 0:
			if d == 0 {
				tb.Fatalf("%s %s: a full buffer without a record or an error", f, c)
			}
			chunk, next := buf[:d], fresh()
			if d == n {
				fr.Clear()
				n = 0
			} else {
				n = fr.Carry(next, buf, n)
			}
			check(n)
			emit(chunk, recordFlags(d, d), d)
			buf = next
		}
	}
	if n > 0 && r.err == nil {
		emit(buf[:n], recordFlags(fr.Done(), n), fr.Done())
	}
	if len(em.bad) > 0 {
		tb.Fatalf("%s %s: %s", f, c, strings.Join(em.bad, "; "))
	}
	r.skipped = em.skipped
	return r
}

// feeds returns the ways the Frames tests read a stream into 64-byte
// buffers: reads of every size from one byte to a buffer and one more,
// reads larger than any buffer, and a few mixes, each emitting full
// buffers only or after every read.
func feeds() [][]int {
	var rs [][]int
	for k := 1; k <= 65; k++ {
		rs = append(rs, []int{k})
	}
	return append(rs, []int{127}, []int{1 << 20}, []int{1, 63}, []int{63, 1}, []int{7, 64, 2}, []int{64, 1, 1, 3}, []int{2, 3, 5, 7, 11, 13})
}

func forFeeds(yield func(feed) bool) {
	for _, reads := range feeds() {
		if !yield(feed{buf: 64, reads: reads}) || !yield(feed{buf: 64, reads: reads, eager: true}) {
			return
		}
	}
}

// What becomes of a record in a Frames test.
const (
	keep  = iota // delivered
	skip         // skipped and reported
	fatal        // ends the lane with an error
)

type rec struct {
	b    []byte
	fate int
}

func keeps(bs ...[]byte) []rec {
	rs := make([]rec, len(bs))
	for i, b := range bs {
		rs[i] = rec{b, keep}
	}
	return rs
}

type framesCase struct {
	name string
	f    srcs.Framer
	recs []rec
	// tail is a record the stream ends inside of, delivered Truncated
	// unless it is skipped (tailSkipped).
	tail        []byte
	tailSkipped bool
	// err is what the fatal record ends the lane with (errors.Is).
	err error
}

func (tc framesCase) stream() []byte {
	var s []byte
	for _, r := range tc.recs {
		s = append(s, r.b...)
	}
	return append(s, tc.tail...)
}

// want returns the records delivered, the count skipped, and the tail.
func (tc framesCase) want() (out []byte, skipped int, tail []byte) {
	for _, r := range tc.recs {
		switch r.fate {
		case keep:
			out = append(out, r.b...)
		case skip:
			skipped++
		case fatal:
			return out, skipped, nil
		}
	}
	if tc.tailSkipped {
		return out, skipped + 1, nil
	}
	return out, skipped, tc.tail
}

func framesCases() []framesCase {
	nl := srcs.Newline{}
	be, le := binary.BigEndian, binary.LittleEndian
	cases := []framesCase{
		{name: "newline short", f: nl, recs: keeps(rt.Line(0, 0), rt.Line(1, 1), rt.Line(5, 2), rt.Line(0, 3), rt.Line(20, 4), rt.Line(2, 5))},
		{name: "newline mixed", f: nl, recs: keeps(rt.Line(10, 0), rt.Line(62, 1), rt.Line(63, 2), rt.Line(1, 3), rt.Line(63, 4), rt.Line(63, 5), rt.Line(30, 6), rt.Line(40, 7))},
		{name: "newline fills buffers", f: nl, recs: keeps(rt.Line(63, 0), rt.Line(63, 1), rt.Line(63, 2), rt.Line(31, 3), rt.Line(31, 4), rt.Line(63, 5))},
		{name: "newline one over", f: nl, recs: []rec{{rt.Line(5, 0), keep}, {rt.Line(64, 1), skip}, {rt.Line(63, 2), keep}, {rt.Line(64, 3), skip}, {rt.Line(64, 4), skip}, {rt.Line(1, 5), keep}}},
		{name: "newline one over first", f: nl, recs: []rec{{rt.Line(64, 0), skip}, {rt.Line(63, 1), keep}}},
		{name: "newline long", f: nl, recs: []rec{{rt.Line(3, 0), keep}, {rt.Line(200, 1), skip}, {rt.Line(7, 2), keep}, {rt.Line(1000, 3), skip}, {rt.Line(0, 4), keep}, {rt.Line(127, 5), skip}, {rt.Line(128, 6), skip}, {rt.Line(62, 7), keep}}},
		{name: "newline tail", f: nl, recs: keeps(rt.Line(10, 0), rt.Line(30, 1)), tail: []byte("partial")},
		{name: "newline tail fills", f: nl, recs: keeps(rt.Line(10, 0)), tail: rt.Line(63, 1)[:63]},
		{name: "newline tail over", f: nl, recs: keeps(rt.Line(10, 0)), tail: rt.Line(64, 1)[:64], tailSkipped: true},
		{name: "newline tail long", f: nl, recs: keeps(rt.Line(10, 0)), tail: rt.Line(300, 1)[:300], tailSkipped: true},
		{name: "newline only tail", f: nl, tail: []byte("abc")},
		{name: "newline max", f: srcs.Newline{Max: 10}, recs: []rec{{rt.Line(10, 0), keep}, {rt.Line(11, 1), skip}, {rt.Line(0, 2), keep}, {rt.Line(63, 3), skip}, {rt.Line(64, 4), skip}, {rt.Line(9, 5), keep}, {rt.Line(12, 6), skip}}},
		{name: "newline max tail", f: srcs.Newline{Max: 10}, recs: keeps(rt.Line(3, 0)), tail: rt.Line(11, 1)[:11], tailSkipped: true},

		{name: "octet", f: srcs.OctetCounting{}, recs: keeps(rt.Octet(1, 0), rt.Octet(5, 1), rt.Octet(10, 2), rt.Octet(61, 3), rt.Octet(58, 4), rt.Octet(61, 5), rt.Octet(9, 6), rt.Octet(59, 7), rt.Octet(7, 8))},
		{name: "octet one over", f: srcs.OctetCounting{}, recs: []rec{{rt.Octet(5, 0), keep}, {rt.Octet(62, 1), skip}, {rt.Octet(61, 2), keep}, {rt.Octet(62, 3), skip}, {rt.Octet(62, 4), skip}, {rt.Octet(1, 5), keep}}},
		{name: "octet long", f: srcs.OctetCounting{}, recs: []rec{{rt.Octet(62, 0), skip}, {rt.Octet(3, 1), keep}, {rt.Octet(100, 2), skip}, {rt.Octet(5000, 3), skip}, {rt.Octet(7, 4), keep}, {rt.Octet(60, 5), keep}}},
		{name: "octet max", f: srcs.OctetCounting{Max: 8}, recs: []rec{{rt.Octet(8, 0), keep}, {rt.Octet(9, 1), skip}, {rt.Octet(1, 2), keep}, {rt.Octet(61, 3), skip}, {rt.Octet(8, 4), keep}}},
		{name: "octet tail", f: srcs.OctetCounting{}, recs: keeps(rt.Octet(20, 0)), tail: rt.Octet(30, 1)[:20]},
		{name: "octet tail length", f: srcs.OctetCounting{}, recs: keeps(rt.Octet(20, 0)), tail: []byte("12")},
		{name: "octet tail over", f: srcs.OctetCounting{}, recs: keeps(rt.Octet(20, 0)), tail: rt.Octet(300, 1)[:100], tailSkipped: true},
		{name: "octet malformed", f: srcs.OctetCounting{}, recs: []rec{{rt.Octet(20, 0), keep}, {rt.Octet(100, 0), skip}, {[]byte("05 hello"), fatal}, {rt.Octet(3, 0), keep}}, err: srcs.ErrMalformed},
		{name: "octet ten digits", f: srcs.OctetCounting{}, recs: []rec{{rt.Octet(20, 0), keep}, {[]byte("1234567890 "), fatal}}, err: srcs.ErrMalformed},

		{name: "mqtt", f: srcs.MQTTPackets{}, recs: keeps(rt.MQTTPkt(0x30, 0, 0), rt.MQTTPkt(0xc0, 0, 0), rt.MQTTPkt(0x32, 10, 1), rt.MQTTPkt(0x30, 62, 2), rt.MQTTPkt(0x30, 62, 3), rt.MQTTPkt(0x82, 7, 4), rt.MQTTPkt(0x30, 60, 5))},
		{name: "mqtt one over", f: srcs.MQTTPackets{}, recs: []rec{{rt.MQTTPkt(0x30, 5, 0), keep}, {rt.MQTTPkt(0x30, 63, 1), fatal}, {rt.MQTTPkt(0x30, 5, 2), keep}}, err: srcs.ErrTooLarge},
		{name: "mqtt long", f: srcs.MQTTPackets{}, recs: []rec{{rt.MQTTPkt(0x30, 61, 0), keep}, {rt.MQTTPkt(0x30, 300, 1), fatal}}, err: srcs.ErrTooLarge},
		{name: "mqtt max", f: srcs.MQTTPackets{Max: 4}, recs: []rec{{rt.MQTTPkt(0x30, 4, 0), keep}, {rt.MQTTPkt(0x30, 5, 1), fatal}}, err: srcs.ErrRecordTooLong},
		{name: "mqtt type 0", f: srcs.MQTTPackets{}, recs: []rec{{rt.MQTTPkt(0x30, 40, 0), keep}, {rt.MQTTPkt(0x00, 1, 1), fatal}}, err: srcs.ErrMalformed},
		{name: "mqtt fifth length byte", f: srcs.MQTTPackets{}, recs: []rec{{rt.MQTTPkt(0x30, 40, 0), keep}, {[]byte{0x30, 0x80, 0x80, 0x80, 0x80, 0}, fatal}}, err: srcs.ErrMalformed},
		{name: "mqtt refused", f: srcs.MQTTPackets{Check: rt.RefuseType(0xe)}, recs: []rec{{rt.MQTTPkt(0x30, 40, 0), keep}, {rt.MQTTPkt(0xd0, 0, 1), keep}, {rt.MQTTPkt(0xe0, 0, 2), fatal}}, err: rt.ErrRefused},
		{name: "mqtt tail", f: srcs.MQTTPackets{}, recs: keeps(rt.MQTTPkt(0x30, 40, 0)), tail: []byte{0x30, 0x80}},
	}
	for _, size := range []int{1, 2, 4, 8} {
		for _, order := range []binary.ByteOrder{be, le} {
			f := srcs.LengthPrefix{Size: size, Order: order}
			r := func(n int, seed byte) []byte { return rt.LenRec(size, order, n, seed) }
			fill := 64 - size
			cases = append(cases,
				framesCase{name: f.String(), f: f, recs: keeps(r(0, 0), r(1, 1), r(10, 2), r(fill, 3), r(fill-1, 4), r(fill, 5), r(30, 6), r(0, 7), r(fill, 8), r(5, 9))},
				framesCase{name: f.String() + " one over", f: f, recs: []rec{{r(10, 0), keep}, {r(fill, 1), keep}, {r(fill+1, 2), fatal}, {r(1, 3), keep}}, err: srcs.ErrRecordTooLong},
				framesCase{name: f.String() + " one over first", f: f, recs: []rec{{r(fill+1, 2), fatal}}, err: srcs.ErrRecordTooLong},
				framesCase{name: f.String() + " tail", f: f, recs: keeps(r(20, 0)), tail: r(fill, 1)[:fill]},
				framesCase{name: f.String() + " max", f: srcs.LengthPrefix{Size: size, Order: order, Max: 6}, recs: []rec{{r(6, 0), keep}, {r(7, 1), fatal}}, err: srcs.ErrRecordTooLong},
			)
		}
	}
	return cases
}

// TestFrames drives every framer through Frames as a runner does and
// checks that the records come out exactly, in order, whatever the read
// sizes, with the records that are too long skipped and reported or
// ending the lane.
func TestFrames(t *testing.T) {
	for _, tc := range framesCases() {
		t.Run(tc.name, func(t *testing.T) {
			stream := tc.stream()
			out, skipped, tail := tc.want()
			for c := range forFeeds {
				got := runFeed(t, tc.f, stream, c)
				if !bytes.Equal(got.out, out) {
					t.Fatalf("%s: records\n%q\nwant\n%q", c, got.out, out)
				}
				if !bytes.Equal(got.tail, tail) {
					t.Fatalf("%s: truncated tail %q, want %q", c, got.tail, tail)
				}
				if len(got.skipped) != skipped {
					t.Fatalf("%s: %d records skipped (%v), want %d", c, len(got.skipped), got.skipped, skipped)
				}
				for _, re := range got.skipped {
					if re.Skip == 0 || re.Framer != tc.f.String() || re.Size <= int64(re.Max) {
						t.Fatalf("%s: skipped %+v", c, *re)
					}
				}
				switch {
				case tc.err == nil && got.err != nil:
					t.Fatalf("%s: %v", c, got.err)
				case tc.err != nil && !errors.Is(got.err, tc.err):
					t.Fatalf("%s: err = %v, want %v", c, got.err, tc.err)
				}
				var re *srcs.RecordError
				if errors.As(got.err, &re) && re.Skip != 0 {
					t.Fatalf("%s: lane ended by %v with Skip %d", c, re, re.Skip)
				}
			}
		})
	}
}

// lazy is a framer that never reports a record too long: it finds '\n'
// and otherwise waits.
type lazy struct{}

func (lazy) String() string { return "lazy" }
func (lazy) Next(p []byte, _, _ int) (int, error) {
	return bytes.IndexByte(p, '\n') + 1, nil
}

func TestFramesFullBuffer(t *testing.T) {
	// Frames ends a lane whose buffer fills with one record's beginning,
	// even when the framer does not say so.
	stream := rt.Cat(rt.Line(3, 0), bytes.Repeat([]byte("x"), 200))
	for c := range forFeeds {
		got := runFeed(t, lazy{}, stream, c)
		var re *srcs.RecordError
		if !errors.As(got.err, &re) {
			t.Fatalf("%s: err = %v, want a *RecordError", c, got.err)
		}
		if re.Size != 64 || re.Max != 64 || re.Skip != 0 || re.Framer != "lazy" {
			t.Errorf("%s: %+v", c, *re)
		}
		if string(got.out) != string(rt.Line(3, 0)) {
			t.Errorf("%s: records %q", c, got.out)
		}
	}
}

func TestFramesScanError(t *testing.T) {
	// The bad record's bytes stay in the buffer after an error that ends
	// the lane: Done() marks where they begin.
	f := srcs.LengthPrefix{Size: 1, Order: binary.BigEndian}
	l := &contract.Lane{Framer: f}
	var fr frames
	fr.Reset(l)
	buf := make([]byte, 16)
	n := copy(buf, rt.Cat(rt.LenRec(1, binary.BigEndian, 3, 0), []byte{200, 1, 2}))
	n, err := fr.Scan(buf, n)
	if !errors.Is(err, srcs.ErrRecordTooLong) || n != 7 || fr.Done() != 4 {
		t.Fatalf("Scan = %d, %v; Done() = %d", n, err, fr.Done())
	}
}

func TestFramesZero(t *testing.T) {
	var fr frames
	if fr.On() || fr.Done() != 0 {
		t.Error("zero Frames is on")
	}
	fr.Reset(nil)
	if fr.On() {
		t.Error("Frames on after Reset(nil)")
	}
	fr.Reset(&contract.Lane{})
	if fr.On() {
		t.Error("Frames on for a lane without a framer")
	}
	fr.Reset(&contract.Lane{Framer: srcs.Newline{}})
	if !fr.On() {
		t.Error("Frames off for a framed lane")
	}
}

func TestFramesWithoutReporter(t *testing.T) {
	// A lane whose Out does not count skipped records still skips them.
	for _, tc := range []struct {
		f   srcs.Framer
		rec func(i int) ([]byte, bool) // the i-th record, and whether it fits
	}{
		{srcs.Newline{Max: 4}, func(i int) ([]byte, bool) { return rt.Line(i%8, byte(i)), i%8 <= 4 }},
		{srcs.OctetCounting{Max: 4}, func(i int) ([]byte, bool) { return rt.Octet(i%8+1, byte(i)), i%8+1 <= 4 }},
	} {
		var stream, want []byte
		for i := range 20 {
			r, ok := tc.rec(i)
			stream = append(stream, r...)
			if ok {
				want = append(want, r...)
			}
		}
		var fr frames
		fr.Reset(&contract.Lane{Framer: tc.f})
		buf := make([]byte, 1024)
		n, err := fr.Scan(buf, copy(buf, stream))
		if err != nil || !bytes.Equal(buf[:n], want) || fr.Done() != n {
			t.Errorf("%s: Scan = %d, %v: %q\nwant %q", tc.f, n, err, buf[:n], want)
		}
	}
}

// TestFramesScanAllocs checks that framing a buffer allocates nothing.
func TestFramesScanAllocs(t *testing.T) {
	be := binary.BigEndian
	for _, tc := range []struct {
		f   srcs.Framer
		rec []byte
	}{
		{srcs.Newline{}, rt.Line(100, 0)},
		{srcs.LengthPrefix{Size: 4, Order: be}, rt.LenRec(4, be, 100, 0)},
		{srcs.OctetCounting{}, rt.Octet(100, 0)},
		{srcs.MQTTPackets{}, rt.MQTTPkt(0x30, 100, 0)},
	} {
		stream := bytes.Repeat(tc.rec, 50)
		l := &contract.Lane{Framer: tc.f, Out: &recorder{}}
		var fr frames
		a, b := make([]byte, 1000), make([]byte, 1000)
		allocs := testing.AllocsPerRun(20, func() {
			fr.Reset(l)
			n := 0
			for off := 0; off < len(stream); {
				k := copy(a[n:min(n+300, len(a))], stream[off:])
				off += k
				n, _ = fr.Scan(a, n+k)
				if n == len(a) {
					n = fr.Carry(b, a, n)
					a, b = b, a
				}
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per stream", tc.f, allocs)
		}
	}
}

// fuzzFeed returns a feed of buffers from 16 to 128 bytes and reads of
// sizes drawn from seed: a few bytes, up to a buffer, or more.
func fuzzFeed(buf uint8, seed uint64, eager bool) feed {
	c := feed{buf: 16 + int(buf)%113, eager: eager}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for range 1 + rng.IntN(32) {
		switch rng.IntN(3) {
		case 0:
			c.reads = append(c.reads, 1+rng.IntN(8))
		case 1:
			c.reads = append(c.reads, 1+rng.IntN(c.buf))
		default:
			c.reads = append(c.reads, 1+rng.IntN(4*c.buf))
		}
	}
	return c
}

// checkFeed runs stream through Frames with c and compares the outcome
// with model.
func checkFeed(t *testing.T, f srcs.Framer, stream []byte, c feed) {
	t.Helper()
	want := rt.Model(f, stream, c.buf)
	got := runFeed(t, f, stream, c)
	if !bytes.Equal(got.out, want.Out) {
		t.Fatalf("%s %s: stream %q\nrecords %q\nwant    %q", f, c, stream, got.out, want.Out)
	}
	if !bytes.Equal(got.tail, want.Tail) {
		t.Fatalf("%s %s: stream %q\ntail %q, want %q", f, c, stream, got.tail, want.Tail)
	}
	if (got.err == nil) != (want.Err == nil) || want.Err != nil && !errors.Is(got.err, want.Err) {
		t.Fatalf("%s %s: stream %q: err = %v, want %v", f, c, stream, got.err, want.Err)
	}
	var re *srcs.RecordError
	if errors.As(got.err, &re) && re.Skip != 0 {
		t.Fatalf("%s %s: the lane ended with %v, Skip %d", f, c, re, re.Skip)
	}
	if len(got.skipped) != len(want.Skipped) {
		t.Fatalf("%s %s: stream %q: %d records skipped, want %d", f, c, stream, len(got.skipped), len(want.Skipped))
	}
	for i, re := range got.skipped {
		w := want.Skipped[i]
		if re.Size < w.SizeLo || re.Size > w.SizeHi || re.Max != w.Max || re.Skip != w.Skip {
			t.Fatalf("%s %s: skipped record %d: %+v, want Size %d..%d, Max %d, Skip %d", f, c, i, *re, w.SizeLo, w.SizeHi, w.Max, w.Skip)
		}
	}
}

// FuzzNewline frames the fuzz input as a newline stream.
func FuzzNewline(f *testing.F) {
	var long []byte
	for i, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 300, 3, 0} {
		long = append(long, rt.Line(n, byte(i))...)
	}
	f.Add([]byte("a\nbb\n\nccc"), uint16(0), uint8(0), uint64(1), false)
	f.Add(long, uint16(0), uint8(48), uint64(2), false)
	f.Add(long, uint16(0), uint8(48), uint64(3), true)
	f.Add(long, uint16(20), uint8(112), uint64(4), false)
	f.Add(long[:len(long)-2], uint16(0), uint8(0), uint64(5), true)
	f.Fuzz(func(t *testing.T, stream []byte, max uint16, buf uint8, seed uint64, eager bool) {
		checkFeed(t, srcs.Newline{Max: int(max % 160)}, stream, fuzzFeed(buf, seed, eager))
	})
}

// FuzzLengthPrefix frames records built from the fuzz input: each byte is
// one record's length, and 0xff puts the next Size bytes in the stream as
// they are, a length field of any value.
func FuzzLengthPrefix(f *testing.F) {
	f.Add([]byte{0, 1, 10, 48, 60, 63, 64, 65, 5}, uint8(2), false, uint16(0), uint8(48), uint64(1), false, uint16(0))
	f.Add([]byte{3, 14, 15, 92, 65, 35}, uint8(0), true, uint16(0), uint8(0), uint64(2), true, uint16(3))
	f.Add([]byte{7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint8(3), false, uint16(0), uint8(10), uint64(3), false, uint16(0))
	f.Add([]byte{4, 5, 6, 7}, uint8(1), true, uint16(5), uint8(20), uint64(4), false, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, sizeSel uint8, le bool, max uint16, buf uint8, seed uint64, eager bool, k uint16) {
		size := []int{1, 2, 4, 8}[sizeSel%4]
		order := binary.ByteOrder(binary.BigEndian)
		if le {
			order = binary.LittleEndian
		}
		var stream []byte
		for i := 0; i < len(data); i++ {
			if data[i] == 0xff && i+size < len(data) {
				stream = append(stream, data[i+1:i+1+size]...)
				i += size
				continue
			}
			n := rt.Lengths(data[i])
			if size == 1 {
				n %= 256
			}
			stream = append(stream, rt.LenRec(size, order, n, byte(i))...)
		}
		fr := srcs.LengthPrefix{Size: size, Order: order, Max: int(max % 160)}
		checkFeed(t, fr, rt.Cut(stream, k), fuzzFeed(buf, seed, eager))
	})
}

// FuzzOctet frames RFC 6587 records built from the fuzz input: each byte
// is one message's length, and 0 puts the next byte in the stream as it
// is, which may break a length field.
func FuzzOctet(f *testing.F) {
	f.Add([]byte{1, 5, 10, 61, 62, 58, 0xf3, 9}, uint16(0), uint8(48), uint64(1), false, uint16(0))
	f.Add([]byte{12, 13, 0, '0', 4}, uint16(0), uint8(0), uint64(2), true, uint16(0))
	f.Add([]byte{20, 30, 40}, uint16(25), uint8(100), uint64(3), false, uint16(7))
	f.Add([]byte{0, '1', 0, '2', 5}, uint16(0), uint8(20), uint64(4), false, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, max uint16, buf uint8, seed uint64, eager bool, k uint16) {
		var stream []byte
		for i := 0; i < len(data); i++ {
			if data[i] == 0 && i+1 < len(data) {
				stream = append(stream, data[i+1])
				i++
				continue
			}
			stream = append(stream, rt.Octet(rt.Max1(rt.Lengths(data[i])), byte(i))...)
		}
		checkFeed(t, srcs.OctetCounting{Max: int(max % 160)}, rt.Cut(stream, k), fuzzFeed(buf, seed, eager))
	})
}

// FuzzMQTT frames MQTT packets built from the fuzz input: each pair of
// bytes is a header byte (types 0 are malformed) and a remaining length
// (three times the byte, so up to two length bytes), and a header byte of
// 0 puts the next byte in the stream as it is.
func FuzzMQTT(f *testing.F) {
	f.Add([]byte{0x30, 0, 0xc0, 0, 0x32, 10, 0x30, 20, 0x30, 21, 0x82, 3}, uint16(0), uint8(48), uint64(1), false, false, uint16(0))
	f.Add([]byte{0x30, 100, 0x30, 1}, uint16(0), uint8(112), uint64(2), true, false, uint16(0))
	f.Add([]byte{0x30, 5, 0xe0, 0, 0x30, 5}, uint16(0), uint8(48), uint64(3), false, true, uint16(0))
	f.Add([]byte{0x30, 5, 0, 0x30, 0, 0x80, 0, 0x80, 0, 0x80, 0, 0x80}, uint16(0), uint8(48), uint64(4), false, false, uint16(0))
	f.Add([]byte{0x30, 5, 0x05, 1}, uint16(4), uint8(48), uint64(5), false, false, uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, max uint16, buf uint8, seed uint64, eager, check bool, k uint16) {
		var stream []byte
		for i := 0; i+1 < len(data); i += 2 {
			if data[i] == 0 {
				stream = append(stream, data[i+1])
				continue
			}
			stream = append(stream, rt.MQTTPkt(data[i], 3*int(data[i+1]), byte(i))...)
		}
		fr := srcs.MQTTPackets{Max: int(max % 160)}
		if check {
			fr.Check = rt.RefuseType(0xe)
		}
		checkFeed(t, fr, rt.Cut(stream, k), fuzzFeed(buf, seed, eager))
	})
}
