package srcs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	rt "github.com/sluice-io/sluice/internal/testkit/recordtest"
	"github.com/sluice-io/sluice/srcs"
)

// FuzzFramerNext checks the framers against recordtest.Ref, a reference
// decoder written from the framing rules rather than from the framers'
// code: a record fits when its whole length is at most the limit and its
// payload at most the framer's Max. internal/runner/driver's stream targets run
// it over whole streams.

// checkNext compares one call of f.Next with ref.
func checkNext(t *testing.T, f srcs.Framer, p []byte, seen, limit int) {
	t.Helper()
	n, err := f.Next(p, seen, limit)
	if n < 0 || n > len(p) || n > 0 && err != nil {
		t.Fatalf("%s: Next(%q, %d, %d) = %d, %v", f, p, seen, limit, n, err)
	}
	want := rt.Ref(f, p, limit)
	if got := rt.KindOf(n, err); got != want.Kind || n != want.N {
		t.Fatalf("%s: Next(%q, %d, %d) = %d, %v (kind %d), want kind %d, n %d", f, p, seen, limit, n, err, got, want.Kind, want.N)
	}
	if want.Kind != rt.RefLong {
		return
	}
	var re *srcs.RecordError
	errors.As(err, &re)
	if re.Size < want.SizeLo || re.Size > want.SizeHi || re.Max != want.Max || re.Skip != want.Skip || re.Framer != f.String() {
		t.Fatalf("%s: Next(%q, %d, %d): %+v, want Size %d..%d, Max %d, Skip %d", f, p, seen, limit, *re, want.SizeLo, want.SizeHi, want.Max, want.Skip)
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
		return srcs.MQTTPackets{Max: max, Check: rt.RefuseType(0xe)}
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

// FuzzNewlineWhole checks Newline's Whole against Next called from record
// to record: a prefix of one or more records Next would find without an
// error, or, when p's first record is not whole, Next's own answer.
func FuzzNewlineWhole(f *testing.F) {
	f.Add([]byte("abc\ndef\ngh"), uint16(0), uint32(64), uint16(0))
	f.Add([]byte("abc\ndef\ngh"), uint16(2), uint32(10), uint16(0))
	f.Add([]byte("abc\ndefghijk\nl"), uint16(0), uint32(64), uint16(4))
	f.Add([]byte("abcdefgh\n"), uint16(0), uint32(5), uint16(0))
	f.Add([]byte("abcdefgh"), uint16(3), uint32(8), uint16(0))
	f.Fuzz(func(t *testing.T, p []byte, seen uint16, limit uint32, max uint16) {
		fr := srcs.Newline{Max: int(max % 200)}
		lim := 1 + int(limit%1024)
		s := int(seen) % (len(p) + 1)
		if i := bytes.IndexByte(p, '\n'); i >= 0 && i < s {
			s = i
		}
		k, err := fr.Whole(p, s, lim)
		n, nerr := fr.Next(p, s, lim)
		if n == 0 {
			if k != 0 || (err == nil) != (nerr == nil) || err != nil && err.Error() != nerr.Error() {
				t.Fatalf("Whole(%q, %d, %d) = %d, %v; Next gives 0, %v", p, s, lim, k, err, nerr)
			}
			return
		}
		if err != nil || k < n {
			t.Fatalf("Whole(%q, %d, %d) = %d, %v; the first record is %d bytes", p, s, lim, k, err, n)
		}
		// k must end a record that Next reaches from record to record.
		for off := n; off < k; {
			m, err := fr.Next(p[off:k], 0, lim)
			if err != nil || m == 0 {
				t.Fatalf("Whole(%q, %d, %d) = %d: Next at %d gives %d, %v", p, s, lim, k, off, m, err)
			}
			off += m
		}
	})
}

// FuzzLastByte compares lastByte with bytes.LastIndexByte.
func FuzzLastByte(f *testing.F) {
	f.Add([]byte("abc\ndef\ngh"), byte('\n'))
	f.Add([]byte("\x00\x01\x0b\x0a\x09\x8a\xff"), byte('\n'))
	f.Add([]byte("0123456789abcdef0123456789"), byte('0'))
	f.Fuzz(func(t *testing.T, p []byte, c byte) {
		if got, want := srcs.LastByte(p, c), bytes.LastIndexByte(p, c); got != want {
			t.Fatalf("lastByte(%q, %q) = %d, want %d", p, c, got, want)
		}
	})
}
