package srcs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	rt "github.com/sluice-io/sluice/internal/testkit/recordtest"
	"github.com/sluice-io/sluice/srcs"
)

// The framing tests drive each Framer's Next directly; internal/runner/driver
// drives them through a lane the way a runner does.

// recordErr checks that err is a *RecordError with the given fields.
func recordErr(t *testing.T, err error, framer string, size int64, max int, skip int64) *srcs.RecordError {
	t.Helper()
	var re *srcs.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *RecordError", err)
	}
	if !errors.Is(err, srcs.ErrRecordTooLong) {
		t.Errorf("%v is not ErrRecordTooLong", err)
	}
	got := srcs.RecordError{Framer: re.Framer, Size: re.Size, Max: re.Max, Skip: re.Skip}
	want := srcs.RecordError{Framer: framer, Size: size, Max: max, Skip: skip}
	if got != want {
		t.Errorf("RecordError = %+v, want %+v", got, want)
	}
	return re
}

// nextCase is one call of a Framer's Next.
type nextCase struct {
	name  string
	p     []byte
	seen  int
	limit int // 0: 64
	want  int
	// err, when set, is what the returned error must be (errors.Is).
	err error
	// rec, when set, is the *RecordError expected (Framer, Size, Max and
	// Skip are compared).
	rec *srcs.RecordError
}

func runNext(t *testing.T, f srcs.Framer, tests []nextCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit := tc.limit
			if limit == 0 {
				limit = 64
			}
			n, err := f.Next(tc.p, tc.seen, limit)
			switch {
			case tc.rec != nil:
				recordErr(t, err, tc.rec.Framer, tc.rec.Size, tc.rec.Max, tc.rec.Skip)
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				var re *srcs.RecordError
				if errors.As(err, &re) {
					t.Errorf("err = %v, a *RecordError, for a malformed record", err)
				}
			case err != nil:
				t.Fatalf("err = %v", err)
			}
			if err != nil && n != 0 {
				t.Errorf("n = %d with an error", n)
			}
			if n != tc.want {
				t.Errorf("Next(%q, %d, %d) = %d, want %d", tc.p, tc.seen, limit, n, tc.want)
			}
		})
	}
}

func TestFramerNewlineNext(t *testing.T) {
	b := func(s string) []byte { return []byte(s) }
	re := func(name string, size int64, max int) *srcs.RecordError {
		return &srcs.RecordError{Framer: name, Size: size, Max: max, Skip: srcs.SkipToBoundary}
	}
	runNext(t, srcs.Newline{}, []nextCase{
		{name: "empty", p: b(""), want: 0},
		{name: "complete", p: b("abc\n"), want: 4},
		{name: "first of two", p: b("ab\ncd\n"), want: 3},
		{name: "empty line", p: b("\nabc\n"), want: 1},
		{name: "incomplete", p: b("abc"), want: 0},
		{name: "seen bytes skipped", p: b("abcdef\n"), seen: 6, want: 7},
		{name: "seen all", p: b("abcdef"), seen: 6, want: 0},
		// seen bytes are not searched: a '\n' among them (which the
		// contract rules out) is not found.
		{name: "seen not searched", p: b("ab\ncd\n"), seen: 3, want: 6},
		{name: "payload bytes", p: b("\x00 \xff\r\n"), want: 5},
		{name: "exactly at the limit", p: b("1234567\n"), limit: 8, want: 8},
		{name: "at the limit waiting", p: b("1234567"), limit: 8, want: 0},
		{name: "one over the limit", p: b("12345678\n"), limit: 8, rec: re("newline", 8, 7)},
		{name: "over the limit without newline", p: b("12345678"), limit: 8, rec: re("newline", 8, 7)},
		{name: "over the limit with seen", p: b("1234567890"), seen: 9, limit: 8, rec: re("newline", 10, 7)},
		{name: "newline after the limit", p: b("123456789\nab"), seen: 3, limit: 8, rec: re("newline", 9, 7)},
		{name: "shorter records pass the long one", p: b("1\n2345678901"), limit: 8, want: 2},
	})
	runNext(t, srcs.Newline{Max: 4}, []nextCase{
		{name: "at max", p: b("abcd\n"), want: 5},
		{name: "at max waiting", p: b("abcd"), want: 0},
		{name: "one over max", p: b("abcde\n"), rec: re("newline:4", 5, 4)},
		{name: "one over max without newline", p: b("abcde"), rec: re("newline:4", 5, 4)},
		{name: "over max seen", p: b("abcdefgh\n"), seen: 8, rec: re("newline:4", 8, 4)},
		{name: "limit below max", p: b("abcd\n"), limit: 4, rec: re("newline:4", 4, 3)},
	})
	runNext(t, srcs.Newline{Max: 100}, []nextCase{
		{name: "limit below max", p: b("12345678\n"), limit: 8, rec: re("newline:100", 8, 7)},
		{name: "limit below max fits", p: b("1234567\n"), limit: 8, want: 8},
	})
}

func TestFramerNewlineResync(t *testing.T) {
	for _, tc := range []struct {
		p    string
		n    int
		ok   bool
		name string
	}{
		{"", 0, false, "empty"},
		{"abc", 3, false, "no newline"},
		{"\n", 1, true, "newline"},
		{"abc\ndef\n", 4, true, "first newline"},
	} {
		n, ok := srcs.Newline{}.Resync([]byte(tc.p))
		if n != tc.n || ok != tc.ok {
			t.Errorf("%s: Resync(%q) = %d, %v, want %d, %v", tc.name, tc.p, n, ok, tc.n, tc.ok)
		}
	}
}

func TestFramerLengthPrefixNext(t *testing.T) {
	for _, size := range []int{1, 2, 4, 8} {
		for _, order := range []binary.ByteOrder{binary.BigEndian, binary.LittleEndian} {
			f := srcs.LengthPrefix{Size: size, Order: order}
			fm := srcs.LengthPrefix{Size: size, Order: order, Max: 4}
			hdr := func(v uint64) []byte { return rt.Prefix(size, order, v) }
			re := func(f srcs.Framer, size int64, max int) *srcs.RecordError {
				return &srcs.RecordError{Framer: f.String(), Size: size, Max: max}
			}
			t.Run(f.String(), func(t *testing.T) {
				runNext(t, f, []nextCase{
					{name: "empty", p: nil, want: 0},
					{name: "incomplete prefix", p: hdr(5)[:size-1], want: 0},
					{name: "prefix only", p: hdr(5), want: 0},
					{name: "complete", p: rt.Cat(hdr(5), []byte("hello")), want: size + 5},
					{name: "first of two", p: rt.Cat(hdr(2), []byte("ab"), hdr(1), []byte("c")), want: size + 2},
					{name: "empty record", p: hdr(0), want: size},
					{name: "incomplete", p: rt.Cat(hdr(5), []byte("hell")), want: 0},
					{name: "payload bytes", p: rt.Cat(hdr(3), []byte("\n \x00")), want: size + 3},
					{name: "exactly at the limit", p: rt.LenRec(size, order, 10, 1), limit: size + 10, want: size + 10},
					{name: "one over the limit", p: rt.LenRec(size, order, 11, 1), limit: size + 10, rec: re(f, int64(size+11), 10)},
					{name: "over the limit before the payload", p: hdr(200), limit: size + 10, rec: re(f, int64(size+200), 10)},
				})
				runNext(t, fm, []nextCase{
					{name: "at max", p: rt.LenRec(size, order, 4, 1), want: size + 4},
					{name: "one over max", p: hdr(5), rec: re(fm, int64(size+5), 4)},
					{name: "limit below max", p: hdr(4), limit: size + 3, rec: re(fm, int64(size+4), 3)},
				})
			})
		}
	}
	// The byte order is the framer's, not the host's.
	be := srcs.LengthPrefix{Size: 2, Order: binary.BigEndian}
	le := srcs.LengthPrefix{Size: 2, Order: binary.LittleEndian}
	p := append([]byte{0x00, 0x03}, "abcdefgh"...)
	if n, err := be.Next(p, 0, 64); n != 5 || err != nil {
		t.Errorf("length:2be Next = %d, %v, want 5", n, err)
	}
	p = append([]byte{0x03, 0x00}, "abcdefgh"...)
	if n, err := le.Next(p, 0, 64); n != 5 || err != nil {
		t.Errorf("length:2le Next = %d, %v, want 5", n, err)
	}
	if _, err := be.Next(p, 0, 1<<20); err != nil {
		t.Errorf("length:2be Next(0x0300...) = %v, want 0 (a 768-byte record)", err)
	}

	t.Run("huge", func(t *testing.T) {
		f := srcs.LengthPrefix{Size: 8, Order: binary.BigEndian}
		for _, v := range []uint64{math.MaxUint64, math.MaxInt64, math.MaxInt64 - 8, 1 << 40} {
			n, err := f.Next(rt.Prefix(8, binary.BigEndian, v), 0, math.MaxInt32)
			var re *srcs.RecordError
			if n != 0 || !errors.As(err, &re) {
				t.Fatalf("Next(%#x) = %d, %v, want a *RecordError", v, n, err)
			}
			if re.Size < 1<<40 || re.Max != math.MaxInt32-8 || re.Skip != 0 {
				t.Errorf("Next(%#x): %+v", v, *re)
			}
		}
	})
	t.Run("limit below the prefix", func(t *testing.T) {
		// A buffer shorter than the prefix holds no record at all; the
		// length field must not wrap into a small or negative count.
		f := srcs.LengthPrefix{Size: 8, Order: binary.BigEndian}
		for _, v := range []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 11} {
			p := rt.Cat(rt.Prefix(8, binary.BigEndian, v), make([]byte, 16))
			for limit := 1; limit < 8; limit++ {
				n, err := f.Next(p, 0, limit)
				if n != 0 || !errors.Is(err, srcs.ErrRecordTooLong) {
					t.Errorf("Next(%#x, limit %d) = %d, %v, want ErrRecordTooLong", v, limit, n, err)
				}
			}
		}
	})
	t.Run("bad size", func(t *testing.T) {
		for _, size := range []int{0, 3, 5, 16} {
			f := srcs.LengthPrefix{Size: size, Order: binary.BigEndian}
			n, err := f.Next(make([]byte, 32), 0, 64)
			if n != 0 || !errors.Is(err, srcs.ErrMalformed) {
				t.Errorf("Size %d: Next = %d, %v, want ErrMalformed", size, n, err)
			}
		}
	})
}

func TestFramerOctetNext(t *testing.T) {
	b := func(s string) []byte { return []byte(s) }
	re := func(name string, size int64, max int) *srcs.RecordError {
		return &srcs.RecordError{Framer: name, Size: size, Max: max, Skip: size}
	}
	runNext(t, srcs.OctetCounting{}, []nextCase{
		{name: "empty", p: b(""), want: 0},
		{name: "complete", p: b("5 hello"), want: 7},
		{name: "first of two", p: b("5 hello5 world"), want: 7},
		{name: "payload bytes", p: b("4 \n 0x"), want: 6},
		{name: "length only", p: b("5"), want: 0},
		{name: "length and space", p: b("5 "), want: 0},
		{name: "incomplete", p: b("5 hell"), want: 0},
		{name: "long length", p: b("12"), want: 0},
		{name: "nine digits waiting", p: b("123456789"), want: 0},
		{name: "nine digits", p: b("123456789 abc"), limit: math.MaxInt32, want: 0},
		{name: "two digits", p: rt.Cat(rt.Octet(12, 1), b("x")), want: 15},
		{name: "leading zero", p: b("05 hello"), err: srcs.ErrMalformed},
		{name: "zero", p: b("0 "), err: srcs.ErrMalformed},
		{name: "lone zero", p: b("0"), err: srcs.ErrMalformed},
		{name: "non-digit", p: b("5x hello"), err: srcs.ErrMalformed},
		{name: "letter", p: b("x"), err: srcs.ErrMalformed},
		{name: "sign", p: b("+5 hello"), err: srcs.ErrMalformed},
		{name: "minus", p: b("-5 hello"), err: srcs.ErrMalformed},
		{name: "tab", p: b("5\thello"), err: srcs.ErrMalformed},
		{name: "newline", p: b("5\nhello"), err: srcs.ErrMalformed},
		{name: "empty field", p: b(" hello"), err: srcs.ErrMalformed},
		{name: "ten digits", p: b("1234567890 "), err: srcs.ErrMalformed},
		{name: "ten digits waiting", p: b("1234567890"), err: srcs.ErrMalformed},
		{name: "exactly at the limit", p: b("8 12345678"), limit: 10, want: 10},
		{name: "one over the limit", p: b("9 123456789"), limit: 10, rec: re("octet", 11, 8)},
		{name: "over the limit before the message", p: b("100 "), rec: re("octet", 104, 60)},
		{name: "over the limit, nine digits", p: b("999999999 "), limit: 1 << 20, rec: re("octet", 1_000_000_009, 1<<20-10)},
	})
	runNext(t, srcs.OctetCounting{Max: 5}, []nextCase{
		{name: "at max", p: b("5 hello"), want: 7},
		{name: "one over max", p: b("6 hello!"), rec: re("octet:5", 8, 5)},
		{name: "limit below max", p: b("5 hello"), limit: 6, rec: re("octet:5", 7, 4)},
	})
}

func TestFramerMQTTNext(t *testing.T) {
	b := func(bs ...byte) []byte { return bs }
	re := func(name string, size int64, max int) *srcs.RecordError {
		return &srcs.RecordError{Framer: name, Size: size, Max: max}
	}
	big := func(n int) []byte { return rt.MQTTPkt(0x30, n, 3) }
	runNext(t, srcs.MQTTPackets{}, []nextCase{
		{name: "empty", p: nil, want: 0},
		{name: "header only", p: b(0x30), want: 0},
		{name: "no payload", p: b(0xc0, 0x00), want: 2},
		{name: "auth", p: b(0xf0, 0x00, 0x30), want: 2},
		{name: "one length byte", p: rt.MQTTPkt(0x32, 5, 1), want: 7},
		{name: "one length byte, max", p: big(127), limit: 1 << 20, want: 129},
		{name: "first of two", p: rt.Cat(rt.MQTTPkt(0x32, 5, 1), rt.MQTTPkt(0x30, 1, 1)), want: 7},
		{name: "incomplete", p: rt.MQTTPkt(0x32, 5, 1)[:6], want: 0},
		{name: "two length bytes", p: big(128), limit: 1 << 20, want: 131},
		{name: "two length bytes, max", p: big(16383), limit: 1 << 20, want: 16386},
		{name: "three length bytes", p: big(16384), limit: 1 << 20, want: 16388},
		{name: "four length bytes", p: big(2097152), limit: 1 << 22, want: 2097157},
		{name: "four length bytes waiting", p: b(0x30, 0xff, 0xff, 0xff, 0x7f), limit: math.MaxInt32, want: 0},
		{name: "length incomplete", p: b(0x30, 0x80), want: 0},
		{name: "length incomplete 3", p: b(0x30, 0x80, 0x80, 0x80), want: 0},
		{name: "fifth length byte", p: b(0x30, 0x80, 0x80, 0x80, 0x80), limit: math.MaxInt32, err: srcs.ErrMalformed},
		{name: "fifth length byte present", p: b(0x30, 0xff, 0xff, 0xff, 0xff, 0x01), limit: math.MaxInt32, err: srcs.ErrMalformed},
		{name: "type 0", p: b(0x00), err: srcs.ErrMalformed},
		{name: "type 0 with flags", p: b(0x0f, 0x00), err: srcs.ErrMalformed},
		{name: "exactly at the limit", p: rt.MQTTPkt(0x30, 8, 1), limit: 10, want: 10},
		{name: "one over the limit", p: rt.MQTTPkt(0x30, 9, 1), limit: 10, rec: re("mqtt", 11, 8)},
		{name: "over the limit before the payload", p: b(0x30, 0x80, 0x01), rec: re("mqtt", 131, 61)},
		{name: "largest remaining length", p: b(0x30, 0xff, 0xff, 0xff, 0x7f), rec: re("mqtt", 268435455+5, 59)},
	})
	runNext(t, srcs.MQTTPackets{Max: 3}, []nextCase{
		{name: "at max", p: rt.MQTTPkt(0x30, 3, 1), want: 5},
		{name: "one over max", p: b(0x30, 0x04), rec: re("mqtt:3", 6, 3)},
		{name: "limit below max", p: b(0x30, 0x03), limit: 4, rec: re("mqtt:3", 5, 2)},
	})
	runNext(t, srcs.MQTTPackets{Check: rt.RefuseType(0xe)}, []nextCase{
		{name: "check passes", p: b(0xd0, 0x00), want: 2},
		{name: "check refuses", p: b(0xe0, 0x00), err: rt.ErrRefused},
		{name: "check refuses the first byte", p: b(0xe0), err: rt.ErrRefused},
		{name: "type 0 before check", p: b(0x00), err: srcs.ErrMalformed},
	})

	t.Run("too large", func(t *testing.T) {
		_, err := srcs.MQTTPackets{Max: 3}.Next(b(0x30, 0x04), 0, 64)
		if !errors.Is(err, srcs.ErrTooLarge) || !errors.Is(err, srcs.ErrRecordTooLong) {
			t.Errorf("err = %v, want ErrTooLarge and ErrRecordTooLong", err)
		}
		if errors.Is(err, srcs.ErrMalformed) {
			t.Errorf("err = %v is ErrMalformed", err)
		}
	})
	t.Run("check sees the header byte", func(t *testing.T) {
		var got []byte
		f := srcs.MQTTPackets{Check: func(h byte) error { got = append(got, h); return nil }}
		if n, err := f.Next(rt.MQTTPkt(0x3b, 2, 0), 0, 64); n != 4 || err != nil {
			t.Fatalf("Next = %d, %v", n, err)
		}
		if !bytes.Equal(got, []byte{0x3b}) {
			t.Errorf("Check saw %x, want 3b", got)
		}
	})
}

func TestFramerStrings(t *testing.T) {
	for _, tc := range []struct {
		f    srcs.Framer
		want string
	}{
		{srcs.Newline{}, "newline"},
		{srcs.Newline{Max: 10}, "newline:10"},
		{srcs.OctetCounting{}, "octet"},
		{srcs.OctetCounting{Max: 65536}, "octet:65536"},
		{srcs.MQTTPackets{}, "mqtt"},
		{srcs.MQTTPackets{Max: 7}, "mqtt:7"},
		{srcs.LengthPrefix{Size: 4, Order: binary.BigEndian}, "length:4be"},
		{srcs.LengthPrefix{Size: 2, Order: binary.LittleEndian, Max: 9}, "length:2le:9"},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.f, got, tc.want)
		}
	}
}

func TestParseFraming(t *testing.T) {
	be, le := binary.BigEndian, binary.LittleEndian
	for _, tc := range []struct {
		in   string
		want srcs.Framer
	}{
		{"", nil},
		{"none", nil},
		{"newline", srcs.Newline{}},
		{"newline:", srcs.Newline{}},
		{"newline:4096", srcs.Newline{Max: 4096}},
		{"newline:64KiB", srcs.Newline{Max: 64 << 10}},
		{"newline:64kib", srcs.Newline{Max: 64 << 10}},
		{"newline:64KB", srcs.Newline{Max: 64000}},
		{"newline:64k", srcs.Newline{Max: 64000}},
		{"newline:1MiB", srcs.Newline{Max: 1 << 20}},
		{"newline:1 MiB", srcs.Newline{Max: 1 << 20}},
		{"newline:1.5KiB", srcs.Newline{Max: 1536}},
		{"newline:1", srcs.Newline{Max: 1}},
		{"newline:2147483647", srcs.Newline{Max: math.MaxInt32}},
		{"octet", srcs.OctetCounting{}},
		{"octet:2048", srcs.OctetCounting{Max: 2048}},
		{"octet:8KiB", srcs.OctetCounting{Max: 8 << 10}},
		{"mqtt", srcs.MQTTPackets{}},
		{"mqtt:256KiB", srcs.MQTTPackets{Max: 256 << 10}},
		{"mqtt:268435455", srcs.MQTTPackets{Max: 268435455}},
		{"length:1be", srcs.LengthPrefix{Size: 1, Order: be}},
		{"length:1le", srcs.LengthPrefix{Size: 1, Order: le}},
		{"length:2be", srcs.LengthPrefix{Size: 2, Order: be}},
		{"length:2le", srcs.LengthPrefix{Size: 2, Order: le}},
		{"length:4be", srcs.LengthPrefix{Size: 4, Order: be}},
		{"length:4le", srcs.LengthPrefix{Size: 4, Order: le}},
		{"length:8be", srcs.LengthPrefix{Size: 8, Order: be}},
		{"length:8le", srcs.LengthPrefix{Size: 8, Order: le}},
		{"length:4be:64KiB", srcs.LengthPrefix{Size: 4, Order: be, Max: 64 << 10}},
		{"length:2le:1000", srcs.LengthPrefix{Size: 2, Order: le, Max: 1000}},
		{"length:8le:1MiB", srcs.LengthPrefix{Size: 8, Order: le, Max: 1 << 20}},
	} {
		got, err := srcs.ParseFraming(tc.in)
		if err != nil {
			t.Errorf("ParseFraming(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFraming(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
		if got == nil {
			continue
		}
		// A framer's name reads back as the same framer.
		again, err := srcs.ParseFraming(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("ParseFraming(%q) = %#v, %v, want %#v", got.String(), again, err, got)
		}
	}
}

func TestParseFramingErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // a part of the message
	}{
		{"none:1", "none takes no parameter"},
		{":1", "none takes no parameter"},
		{"lines", "unknown"},
		{"Newline", "unknown"},
		{"json", "unknown"},
		{"newline:0", "maximum \"0\""},
		{"newline:abc", "maximum \"abc\""},
		{"newline:-1", "from 1 byte"},
		{"newline:0.5", "from 1 byte"},
		{"newline:2GiB", "maximum \"2GiB\""},
		{"newline:3GiB", "maximum \"3GiB\""},
		{"newline:1e3", "maximum"},
		{"octet:0", "maximum"},
		{"octet:big", "maximum"},
		{"mqtt:0", "maximum"},
		{"mqtt:268435456", "at most 268435455"},
		{"mqtt:256MiB", "at most 268435455"},
		{"mqtt:1GiB", "at most 268435455"},
		{"length", "want length:N{be,le}"},
		{"length:", "want length:N{be,le}"},
		{"length:4", "want length:N{be,le}"},
		{"length:be", "want length:N{be,le}"},
		{"length:3be", "1, 2, 4 or 8"},
		{"length:16le", "1, 2, 4 or 8"},
		{"length:0be", "1, 2, 4 or 8"},
		{"length:xbe", "1, 2, 4 or 8"},
		{"length:4BE", "byte order"},
		{"length:4ne", "byte order"},
		{"length:4be:0", "maximum"},
		{"length:4be:x", "maximum"},
	} {
		_, err := srcs.ParseFraming(tc.in)
		if err == nil {
			t.Errorf("ParseFraming(%q) succeeded", tc.in)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) || !strings.Contains(msg, strconv.Quote(tc.in)) {
			t.Errorf("ParseFraming(%q) = %q, want it to quote the input and say %q", tc.in, msg, tc.want)
		}
		if tc.in == "newline:2GiB" && strings.Contains(msg, "to 2 GiB") {
			t.Errorf("ParseFraming(%q) = %q: 2 GiB is refused, the message must not offer it", tc.in, msg)
		}
	}
}

func TestRecordError(t *testing.T) {
	for _, tc := range []struct {
		e    srcs.RecordError
		want string
	}{
		{srcs.RecordError{Framer: "newline:10", Size: 11, Max: 10, Skip: srcs.SkipToBoundary},
			"srcs: record too long: newline:10 record of 11 bytes or more, above the 10-byte maximum (skipped)"},
		{srcs.RecordError{Framer: "octet", Size: 104, Max: 60, Skip: 104},
			"srcs: record too long: octet record of 104 bytes or more, above the 60-byte maximum (skipped)"},
		{srcs.RecordError{Framer: "length:4be", Size: 1028, Max: 1020},
			"srcs: record too long: length:4be record of 1028 bytes or more, above the 1020-byte maximum (the stream ends here)"},
		{srcs.RecordError{Framer: "mqtt", Size: 131, Max: 61, Also: srcs.ErrTooLarge},
			"srcs: record too long: mqtt record of 131 bytes or more, above the 61-byte maximum (the stream ends here)"},
	} {
		e := tc.e
		if got := e.Error(); got != tc.want {
			t.Errorf("Error() = %q\nwant %q", got, tc.want)
		}
		wrapped := fmt.Errorf("lane 3: %w", &e)
		if !errors.Is(wrapped, srcs.ErrRecordTooLong) {
			t.Errorf("%v is not ErrRecordTooLong", wrapped)
		}
		if got := errors.Is(wrapped, srcs.ErrTooLarge); got != (e.Also != nil) {
			t.Errorf("errors.Is(%v, ErrTooLarge) = %v", wrapped, got)
		}
		if errors.Is(wrapped, srcs.ErrMalformed) {
			t.Errorf("%v is ErrMalformed", wrapped)
		}
		var re *srcs.RecordError
		if !errors.As(wrapped, &re) || re != &e {
			t.Errorf("errors.As(%v) did not find the *RecordError", wrapped)
		}
	}

	// The framers' own errors: only MQTT's are ErrTooLarge too.
	for _, tc := range []struct {
		f     srcs.Framer
		p     []byte
		large bool
	}{
		{srcs.Newline{Max: 2}, []byte("abc\n"), false},
		{srcs.OctetCounting{Max: 2}, []byte("3 abc"), false},
		{srcs.LengthPrefix{Size: 1, Order: binary.BigEndian, Max: 2}, []byte{3}, false},
		{srcs.MQTTPackets{Max: 2}, []byte{0x30, 3}, true},
	} {
		_, err := tc.f.Next(tc.p, 0, 64)
		if !errors.Is(err, srcs.ErrRecordTooLong) || errors.Is(err, srcs.ErrTooLarge) != tc.large {
			t.Errorf("%s: err = %v", tc.f, err)
		}
		if !strings.HasPrefix(err.Error(), "srcs: record too long: "+tc.f.String()+" record of ") {
			t.Errorf("%s: message %q", tc.f, err)
		}
	}
}

func TestCountRecords(t *testing.T) {
	be := binary.BigEndian
	for _, tc := range []struct {
		name    string
		f       srcs.Framer
		p       []byte
		records int
		n       int
		err     error
	}{
		{"newline empty", srcs.Newline{}, nil, 0, 0, nil},
		{"newline", srcs.Newline{}, []byte("a\nbb\n\nccc"), 3, 6, nil},
		{"newline whole", srcs.Newline{}, []byte("a\nbb\n"), 2, 5, nil},
		{"newline too long", srcs.Newline{Max: 2}, []byte("a\nbbb\nc\n"), 1, 2, srcs.ErrRecordTooLong},
		{"length", srcs.LengthPrefix{Size: 2, Order: be}, rt.Cat(rt.LenRec(2, be, 3, 0), rt.LenRec(2, be, 0, 0), []byte{0}), 2, 7, nil},
		{"length big", srcs.LengthPrefix{Size: 4, Order: be}, rt.LenRec(4, be, 100000, 0), 1, 100004, nil},
		{"octet", srcs.OctetCounting{}, rt.Cat(rt.Octet(5, 0), rt.Octet(12, 1)), 2, 22, nil},
		{"octet malformed", srcs.OctetCounting{}, rt.Cat(rt.Octet(5, 0), []byte("05 hello")), 1, 7, srcs.ErrMalformed},
		{"mqtt", srcs.MQTTPackets{}, rt.Cat(rt.MQTTPkt(0x30, 200, 0), rt.MQTTPkt(0xc0, 0, 0), rt.MQTTPkt(0x82, 5, 0), []byte{0x30}), 3, 212, nil},
		{"mqtt refused", srcs.MQTTPackets{Check: rt.RefuseType(0xc)}, rt.Cat(rt.MQTTPkt(0x30, 2, 0), rt.MQTTPkt(0xc0, 0, 0)), 1, 4, rt.ErrRefused},
	} {
		records, n, err := srcs.CountRecords(tc.f, tc.p)
		if records != tc.records || n != tc.n || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: CountRecords = %d, %d, %v, want %d, %d, %v", tc.name, records, n, err, tc.records, tc.n, tc.err)
		}
	}
}
