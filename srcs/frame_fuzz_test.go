package srcs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluice-io/sluice/srcs"
)

// The fuzz targets check the framers against ref, a reference decoder
// written from the framing rules rather than from the framers' code: a
// record fits when its whole length is at most the limit and its payload
// at most the framer's Max. FuzzFramerNext compares each Next with ref;
// the stream targets compare what runFeed delivers with model, which runs
// ref over the whole stream.

// What ref makes of the bytes at a record boundary.
const (
	refOK        = iota // a whole record of n bytes
	refMore             // the beginning of a record that fits
	refLong             // a record that does not fit
	refMalformed        // a header that cannot be parsed
	refRefused          // a packet MQTTPackets.Check refuses
)

type refResult struct {
	kind int
	n    int // refOK: the record's length
	// refLong: the *RecordError expected: Size from sizeLo to sizeHi,
	// and max and skip exactly.
	sizeLo, sizeHi int64
	max            int
	skip           int64
}

// fits reports whether a record of overhead+payload bytes fits limit and
// the framer's max (0: none). Its arguments may be far above MaxInt.
func fits(overhead int, payload uint64, limit, max int) bool {
	if max > 0 && payload > uint64(max) {
		return false
	}
	return payload <= uint64(limit) && uint64(overhead)+payload <= uint64(limit)
}

// payloadMax is the largest payload after overhead bytes that fits limit
// and max.
func payloadMax(overhead, limit, max int) int {
	m := limit - overhead
	if max > 0 && max < m {
		m = max
	}
	return m
}

func ref(f srcs.Framer, p []byte, limit int) refResult {
	long := func(size int64, overhead, max int, skip int64) refResult {
		return refResult{kind: refLong, sizeLo: size, sizeHi: size, max: payloadMax(overhead, limit, max), skip: skip}
	}
	switch f := f.(type) {
	case srcs.Newline:
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			// The line is len(p) bytes or more, and needs its '\n'.
			if !fits(1, uint64(len(p)), limit, f.Max) {
				return long(int64(len(p)), 1, f.Max, srcs.SkipToBoundary)
			}
			return refResult{kind: refMore}
		}
		if !fits(1, uint64(i), limit, f.Max) {
			return long(int64(i), 1, f.Max, srcs.SkipToBoundary)
		}
		return refResult{kind: refOK, n: i + 1}

	case srcs.LengthPrefix:
		if len(p) < f.Size {
			return refResult{kind: refMore}
		}
		var b [8]byte
		if f.Order == binary.BigEndian {
			copy(b[8-f.Size:], p[:f.Size])
		} else {
			for i := range f.Size {
				b[7-i] = p[i]
			}
		}
		v := binary.BigEndian.Uint64(b[:])
		if !fits(f.Size, v, limit, f.Max) {
			r := long(int64(v)+int64(f.Size), f.Size, f.Max, 0)
			if v >= math.MaxInt64-8 {
				r.sizeLo, r.sizeHi = math.MaxInt64-8, math.MaxInt64
			}
			return r
		}
		if n := f.Size + int(v); n <= len(p) {
			return refResult{kind: refOK, n: n}
		}
		return refResult{kind: refMore}

	case srcs.OctetCounting:
		i := bytes.IndexByte(p, ' ')
		field := p
		if i >= 0 {
			field = p[:i]
		}
		for j, c := range field {
			if c < '0' || c > '9' || j == 0 && c == '0' || j == srcs.MaxOctetDigits {
				return refResult{kind: refMalformed}
			}
		}
		switch {
		case i < 0:
			return refResult{kind: refMore}
		case i == 0:
			return refResult{kind: refMalformed}
		}
		var v uint64
		for _, c := range field {
			v = v*10 + uint64(c-'0')
		}
		n := int64(i+1) + int64(v)
		if !fits(i+1, v, limit, f.Max) {
			return long(n, i+1, f.Max, n)
		}
		if n <= int64(len(p)) {
			return refResult{kind: refOK, n: int(n)}
		}
		return refResult{kind: refMore}

	case srcs.MQTTPackets:
		if len(p) == 0 {
			return refResult{kind: refMore}
		}
		if p[0] < 0x10 {
			return refResult{kind: refMalformed}
		}
		if f.Check != nil && f.Check(p[0]) != nil {
			return refResult{kind: refRefused}
		}
		var rem uint64
		for i := 1; i <= 4; i++ {
			if i >= len(p) {
				return refResult{kind: refMore}
			}
			rem |= uint64(p[i]&0x7f) << (7 * (i - 1))
			if p[i] < 0x80 {
				n := int64(i+1) + int64(rem)
				if !fits(i+1, rem, limit, f.Max) {
					return long(n, i+1, f.Max, 0)
				}
				if n <= int64(len(p)) {
					return refResult{kind: refOK, n: int(n)}
				}
				return refResult{kind: refMore}
			}
		}
		return refResult{kind: refMalformed}
	}
	panic("ref: unknown framer")
}

// kindOf classifies what Next returned as ref does.
func kindOf(n int, err error) int {
	var re *srcs.RecordError
	switch {
	case err == nil && n > 0:
		return refOK
	case err == nil:
		return refMore
	case errors.As(err, &re):
		return refLong
	case errors.Is(err, errRefused):
		return refRefused
	case errors.Is(err, srcs.ErrMalformed):
		return refMalformed
	}
	return -1
}

// checkNext compares one call of f.Next with ref.
func checkNext(t *testing.T, f srcs.Framer, p []byte, seen, limit int) {
	t.Helper()
	n, err := f.Next(p, seen, limit)
	if n < 0 || n > len(p) || n > 0 && err != nil {
		t.Fatalf("%s: Next(%q, %d, %d) = %d, %v", f, p, seen, limit, n, err)
	}
	want := ref(f, p, limit)
	if got := kindOf(n, err); got != want.kind || n != want.n {
		t.Fatalf("%s: Next(%q, %d, %d) = %d, %v (kind %d), want kind %d, n %d", f, p, seen, limit, n, err, got, want.kind, want.n)
	}
	if want.kind != refLong {
		return
	}
	var re *srcs.RecordError
	errors.As(err, &re)
	if re.Size < want.sizeLo || re.Size > want.sizeHi || re.Max != want.max || re.Skip != want.skip || re.Framer != f.String() {
		t.Fatalf("%s: Next(%q, %d, %d): %+v, want Size %d..%d, Max %d, Skip %d", f, p, seen, limit, *re, want.sizeLo, want.sizeHi, want.max, want.skip)
	}
	if !errors.Is(err, srcs.ErrRecordTooLong) {
		t.Fatalf("%s: %v is not ErrRecordTooLong", f, err)
	}
	if _, mqtt := f.(srcs.MQTTPackets); mqtt != errors.Is(err, srcs.ErrTooLarge) {
		t.Fatalf("%s: %v: ErrTooLarge is %v", f, err, !mqtt)
	}
}

// fuzzFramer picks one of the framers by which.
func fuzzFramer(which uint8, max int) srcs.Framer {
	switch k := int(which) % 22; {
	case k%11 == 0:
		return srcs.Newline{Max: max}
	case k%11 <= 8:
		order := binary.ByteOrder(binary.BigEndian)
		if k%2 == 0 {
			order = binary.LittleEndian
		}
		return srcs.LengthPrefix{Size: []int{1, 2, 4, 8}[(k%11-1)/2], Order: order, Max: max}
	case k%11 == 9:
		return srcs.OctetCounting{Max: max}
	case k < 11:
		return srcs.MQTTPackets{Max: max}
	default:
		return srcs.MQTTPackets{Max: max, Check: refuseType(0xe)}
	}
}

// FuzzFramerNext feeds arbitrary bytes to every framer's Next, with any
// limit and, for Newline, any valid seen, and compares the answer with ref:
// never a panic, never a count beyond p, and a record's length only when
// its header (or its '\n') says so.
func FuzzFramerNext(f *testing.F) {
	f.Add([]byte("abc\ndef\n"), uint8(0), uint16(2), uint32(64), uint16(0))
	f.Add([]byte("abcdefgh"), uint8(0), uint16(8), uint32(8), uint16(4))
	f.Add([]byte{0, 5, 'h', 'e', 'l', 'l', 'o'}, uint8(3), uint16(0), uint32(64), uint16(0))
	f.Add([]byte{5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'}, uint8(6), uint16(0), uint32(64), uint16(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf4, 1, 2, 3}, uint8(7), uint16(0), uint32(3), uint16(0))
	f.Add([]byte("5 hello"), uint8(9), uint16(0), uint32(64), uint16(0))
	f.Add([]byte("05 hello"), uint8(9), uint16(0), uint32(64), uint16(0))
	f.Add([]byte("1234567890 "), uint8(9), uint16(0), uint32(math.MaxInt32), uint16(0))
	f.Add([]byte("999999999 "), uint8(9), uint16(0), uint32(100), uint16(3))
	f.Add([]byte{0x30, 0x05, 1, 2, 3, 4, 5}, uint8(10), uint16(0), uint32(64), uint16(0))
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0x7f}, uint8(10), uint16(0), uint32(math.MaxInt32), uint16(0))
	f.Add([]byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x01}, uint8(10), uint16(0), uint32(64), uint16(0))
	f.Add([]byte{0x00, 0x00}, uint8(10), uint16(0), uint32(64), uint16(0))
	f.Add([]byte{0xe0, 0x00}, uint8(21), uint16(0), uint32(64), uint16(0))
	f.Fuzz(func(t *testing.T, p []byte, which uint8, seen uint16, limit uint32, max uint16) {
		fr := fuzzFramer(which, int(max))
		lim := 1 + int(limit%math.MaxInt32)
		s := 0
		if _, ok := fr.(srcs.Newline); ok {
			// Newline may skip the seen bytes: they hold no '\n'.
			s = int(seen) % (len(p) + 1)
			if i := bytes.IndexByte(p, '\n'); i >= 0 && i < s {
				s = i
			}
		}
		checkNext(t, fr, p, s, lim)
		// Every framer makes the same record of a prefix of p, or waits.
		if n, err := fr.Next(p, s, lim); err == nil && n > 0 {
			checkNext(t, fr, p[:n], min(s, n-1), lim)
			checkNext(t, fr, p[:n-1], min(s, n-1), lim)
		}
	})
}

// expect is what a framed lane must deliver of a stream.
type expect struct {
	out     []byte
	tail    []byte
	skipped []refResult // the *RecordErrors reported, in order
	err     error       // what ends the lane (errors.Is); nil: nothing
}

// model runs ref over a stream the way Frames frames it in buffers of
// bufSize bytes: records that fit are delivered, records too long are
// skipped when the framer can (Newline to the next '\n', OctetCounting by
// the count) and end the lane otherwise, and the stream may end inside a
// record that fits.
func model(f srcs.Framer, s []byte, bufSize int) expect {
	var e expect
	for len(s) > 0 {
		r := ref(f, s, bufSize)
		switch r.kind {
		case refOK:
			e.out = append(e.out, s[:r.n]...)
			s = s[r.n:]
		case refMore:
			e.tail = s
			return e
		case refLong:
			switch {
			case r.skip == srcs.SkipToBoundary:
				// Frames may report the line as soon as it holds more
				// bytes than the maximum.
				i := bytes.IndexByte(s, '\n')
				r.sizeLo, r.sizeHi = int64(r.max)+1, int64(len(s))
				if i >= 0 {
					r.sizeHi = int64(i)
				}
				e.skipped = append(e.skipped, r)
				if i < 0 {
					return e
				}
				s = s[i+1:]
			case r.skip > 0:
				e.skipped = append(e.skipped, r)
				s = s[min(r.skip, int64(len(s))):]
			default:
				e.err = srcs.ErrRecordTooLong
				if _, ok := f.(srcs.MQTTPackets); ok {
					e.err = srcs.ErrTooLarge
				}
				return e
			}
		case refMalformed:
			e.err = srcs.ErrMalformed
			return e
		case refRefused:
			e.err = errRefused
			return e
		}
	}
	return e
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
	want := model(f, stream, c.buf)
	got := runFeed(t, f, stream, c)
	if !bytes.Equal(got.out, want.out) {
		t.Fatalf("%s %s: stream %q\nrecords %q\nwant    %q", f, c, stream, got.out, want.out)
	}
	if !bytes.Equal(got.tail, want.tail) {
		t.Fatalf("%s %s: stream %q\ntail %q, want %q", f, c, stream, got.tail, want.tail)
	}
	if (got.err == nil) != (want.err == nil) || want.err != nil && !errors.Is(got.err, want.err) {
		t.Fatalf("%s %s: stream %q: err = %v, want %v", f, c, stream, got.err, want.err)
	}
	var re *srcs.RecordError
	if errors.As(got.err, &re) && re.Skip != 0 {
		t.Fatalf("%s %s: the lane ended with %v, Skip %d", f, c, re, re.Skip)
	}
	if len(got.skipped) != len(want.skipped) {
		t.Fatalf("%s %s: stream %q: %d records skipped, want %d", f, c, stream, len(got.skipped), len(want.skipped))
	}
	for i, re := range got.skipped {
		w := want.skipped[i]
		if re.Size < w.sizeLo || re.Size > w.sizeHi || re.Max != w.max || re.Skip != w.skip {
			t.Fatalf("%s %s: skipped record %d: %+v, want Size %d..%d, Max %d, Skip %d", f, c, i, *re, w.sizeLo, w.sizeHi, w.max, w.skip)
		}
	}
}

// cut drops the last k%len(s) bytes of s, to end the stream inside a
// record.
func cut(s []byte, k uint16) []byte {
	if len(s) == 0 {
		return s
	}
	return s[:len(s)-int(k)%len(s)]
}

// FuzzNewline frames the fuzz input as a newline stream.
func FuzzNewline(f *testing.F) {
	var long []byte
	for i, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 300, 3, 0} {
		long = append(long, line(n, byte(i))...)
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

// lengths maps a fuzz byte to a record length: mostly around the buffer
// sizes, sometimes many buffers long.
func lengths(b byte) int {
	if b < 0xf0 {
		return int(b)
	}
	return int(b-0xef) * 400
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
			n := lengths(data[i])
			if size == 1 {
				n %= 256
			}
			stream = append(stream, lenRec(size, order, n, byte(i))...)
		}
		fr := srcs.LengthPrefix{Size: size, Order: order, Max: int(max % 160)}
		checkFeed(t, fr, cut(stream, k), fuzzFeed(buf, seed, eager))
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
			stream = append(stream, octet(max1(lengths(data[i])), byte(i))...)
		}
		checkFeed(t, srcs.OctetCounting{Max: int(max % 160)}, cut(stream, k), fuzzFeed(buf, seed, eager))
	})
}

func max1(n int) int { return max(n, 1) }

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
			stream = append(stream, mqttPkt(data[i], 3*int(data[i+1]), byte(i))...)
		}
		fr := srcs.MQTTPackets{Max: int(max % 160)}
		if check {
			fr.Check = refuseType(0xe)
		}
		checkFeed(t, fr, cut(stream, k), fuzzFeed(buf, seed, eager))
	})
}
