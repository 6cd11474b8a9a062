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
	"time"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// The framing tests drive each Framer's Next directly, then drive Frames
// the way a runner does (runFeed): reads of a chosen size into fixed-size
// buffers, Scan after every read, the whole records emitted and the tail
// carried into a fresh buffer.

// errRefused is what the MQTT Check callbacks of these tests return.
var errRefused = errors.New("test: packet type refused")

// refuseType returns an MQTTPackets.Check that refuses one packet type.
func refuseType(typ byte) func(byte) error {
	return func(h byte) error {
		if h>>4 == typ {
			return fmt.Errorf("header 0x%02x: %w", h, errRefused)
		}
		return nil
	}
}

// Records of the tests. The payloads of the counted and prefixed framings
// hold every byte value, '\n' and ' ' included, to show that those framers
// never look inside a record.

// line returns a newline record: n bytes of text and '\n'.
func line(n int, seed byte) []byte {
	b := make([]byte, n+1)
	for i := range n {
		b[i] = 'a' + byte((int(seed)+i)%26)
	}
	b[n] = '\n'
	return b
}

// payload returns n bytes that differ from record to record.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// octet returns an RFC 6587 octet-counted record of an n-byte message.
func octet(n int, seed byte) []byte {
	return append([]byte(strconv.Itoa(n)+" "), payload(n, seed)...)
}

// prefix returns the size-byte length field for v.
func prefix(size int, order binary.ByteOrder, v uint64) []byte {
	b := make([]byte, 8)
	switch size {
	case 1:
		b[0] = byte(v)
	case 2:
		order.PutUint16(b, uint16(v))
	case 4:
		order.PutUint32(b, uint32(v))
	case 8:
		order.PutUint64(b, v)
	}
	return b[:size]
}

// lenRec returns a length-prefixed record of n payload bytes.
func lenRec(size int, order binary.ByteOrder, n int, seed byte) []byte {
	return append(prefix(size, order, uint64(n)), payload(n, seed)...)
}

// appendVarint appends v as an MQTT remaining length.
func appendVarint(dst []byte, v int) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

// mqttPkt returns an MQTT packet with header byte hdr and n bytes after
// the fixed header.
func mqttPkt(hdr byte, n int, seed byte) []byte {
	return append(appendVarint([]byte{hdr}, n), payload(n, seed)...)
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

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
			hdr := func(v uint64) []byte { return prefix(size, order, v) }
			re := func(f srcs.Framer, size int64, max int) *srcs.RecordError {
				return &srcs.RecordError{Framer: f.String(), Size: size, Max: max}
			}
			t.Run(f.String(), func(t *testing.T) {
				runNext(t, f, []nextCase{
					{name: "empty", p: nil, want: 0},
					{name: "incomplete prefix", p: hdr(5)[:size-1], want: 0},
					{name: "prefix only", p: hdr(5), want: 0},
					{name: "complete", p: cat(hdr(5), []byte("hello")), want: size + 5},
					{name: "first of two", p: cat(hdr(2), []byte("ab"), hdr(1), []byte("c")), want: size + 2},
					{name: "empty record", p: hdr(0), want: size},
					{name: "incomplete", p: cat(hdr(5), []byte("hell")), want: 0},
					{name: "payload bytes", p: cat(hdr(3), []byte("\n \x00")), want: size + 3},
					{name: "exactly at the limit", p: lenRec(size, order, 10, 1), limit: size + 10, want: size + 10},
					{name: "one over the limit", p: lenRec(size, order, 11, 1), limit: size + 10, rec: re(f, int64(size+11), 10)},
					{name: "over the limit before the payload", p: hdr(200), limit: size + 10, rec: re(f, int64(size+200), 10)},
				})
				runNext(t, fm, []nextCase{
					{name: "at max", p: lenRec(size, order, 4, 1), want: size + 4},
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
			n, err := f.Next(prefix(8, binary.BigEndian, v), 0, math.MaxInt32)
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
			p := cat(prefix(8, binary.BigEndian, v), make([]byte, 16))
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
		{name: "two digits", p: cat(octet(12, 1), b("x")), want: 15},
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
	big := func(n int) []byte { return mqttPkt(0x30, n, 3) }
	runNext(t, srcs.MQTTPackets{}, []nextCase{
		{name: "empty", p: nil, want: 0},
		{name: "header only", p: b(0x30), want: 0},
		{name: "no payload", p: b(0xc0, 0x00), want: 2},
		{name: "auth", p: b(0xf0, 0x00, 0x30), want: 2},
		{name: "one length byte", p: mqttPkt(0x32, 5, 1), want: 7},
		{name: "one length byte, max", p: big(127), limit: 1 << 20, want: 129},
		{name: "first of two", p: cat(mqttPkt(0x32, 5, 1), mqttPkt(0x30, 1, 1)), want: 7},
		{name: "incomplete", p: mqttPkt(0x32, 5, 1)[:6], want: 0},
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
		{name: "exactly at the limit", p: mqttPkt(0x30, 8, 1), limit: 10, want: 10},
		{name: "one over the limit", p: mqttPkt(0x30, 9, 1), limit: 10, rec: re("mqtt", 11, 8)},
		{name: "over the limit before the payload", p: b(0x30, 0x80, 0x01), rec: re("mqtt", 131, 61)},
		{name: "largest remaining length", p: b(0x30, 0xff, 0xff, 0xff, 0x7f), rec: re("mqtt", 268435455+5, 59)},
	})
	runNext(t, srcs.MQTTPackets{Max: 3}, []nextCase{
		{name: "at max", p: mqttPkt(0x30, 3, 1), want: 5},
		{name: "one over max", p: b(0x30, 0x04), rec: re("mqtt:3", 6, 3)},
		{name: "limit below max", p: b(0x30, 0x03), limit: 4, rec: re("mqtt:3", 5, 2)},
	})
	runNext(t, srcs.MQTTPackets{Check: refuseType(0xe)}, []nextCase{
		{name: "check passes", p: b(0xd0, 0x00), want: 2},
		{name: "check refuses", p: b(0xe0, 0x00), err: errRefused},
		{name: "check refuses the first byte", p: b(0xe0), err: errRefused},
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
		if n, err := f.Next(mqttPkt(0x3b, 2, 0), 0, 64); n != 4 || err != nil {
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
		{"length", srcs.LengthPrefix{Size: 2, Order: be}, cat(lenRec(2, be, 3, 0), lenRec(2, be, 0, 0), []byte{0}), 2, 7, nil},
		{"length big", srcs.LengthPrefix{Size: 4, Order: be}, lenRec(4, be, 100000, 0), 1, 100004, nil},
		{"octet", srcs.OctetCounting{}, cat(octet(5, 0), octet(12, 1)), 2, 22, nil},
		{"octet malformed", srcs.OctetCounting{}, cat(octet(5, 0), []byte("05 hello")), 1, 7, srcs.ErrMalformed},
		{"mqtt", srcs.MQTTPackets{}, cat(mqttPkt(0x30, 200, 0), mqttPkt(0xc0, 0, 0), mqttPkt(0x82, 5, 0), []byte{0x30}), 3, 212, nil},
		{"mqtt refused", srcs.MQTTPackets{Check: refuseType(0xc)}, cat(mqttPkt(0x30, 2, 0), mqttPkt(0xc0, 0, 0)), 1, 4, errRefused},
	} {
		records, n, err := srcs.CountRecords(tc.f, tc.p)
		if records != tc.records || n != tc.n || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: CountRecords = %d, %d, %v, want %d, %d, %v", tc.name, records, n, err, tc.records, tc.n, tc.err)
		}
	}
}

func TestRecordFlags(t *testing.T) {
	if got := srcs.RecordFlags(10, 10); got != srcs.Records {
		t.Errorf("RecordFlags(10, 10) = %v", got)
	}
	if got := srcs.RecordFlags(0, 3); got != srcs.Records|srcs.Truncated {
		t.Errorf("RecordFlags(0, 3) = %v", got)
	}
	if got := srcs.RecordFlags(4, 9).String(); got != "records|truncated" {
		t.Errorf("RecordFlags(4, 9) = %s", got)
	}
}

// recorder is the Emitter of the Frames tests: runFeed keeps the chunks
// itself, so Emit and Finish do nothing, and RecordSkipped keeps the
// reports.
type recorder struct {
	lane    *srcs.Lane
	skipped []*srcs.RecordError
	bad     []string
}

func (r *recorder) Emit(*srcs.Lane, *pool.Buf, int, srcs.Flags, time.Time) {}
func (r *recorder) Finish(*srcs.Lane, error)                               {}

func (r *recorder) RecordSkipped(l *srcs.Lane, err *srcs.RecordError) {
	if l != r.lane {
		r.bad = append(r.bad, fmt.Sprintf("RecordSkipped for lane %p, want %p", l, r.lane))
	}
	if err.Skip == 0 {
		r.bad = append(r.bad, fmt.Sprintf("RecordSkipped(%v) with Skip 0", err))
	}
	r.skipped = append(r.skipped, err)
}

var _ srcs.RecordReporter = (*recorder)(nil)

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
	l := &srcs.Lane{Framer: f, Out: em}
	em.lane = l
	var fr srcs.Frames
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
			emit(chunk, srcs.RecordFlags(d, d), d)
			buf = next
		}
	}
	if n > 0 && r.err == nil {
		emit(buf[:n], srcs.RecordFlags(fr.Done(), n), fr.Done())
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
		{name: "newline short", f: nl, recs: keeps(line(0, 0), line(1, 1), line(5, 2), line(0, 3), line(20, 4), line(2, 5))},
		{name: "newline mixed", f: nl, recs: keeps(line(10, 0), line(62, 1), line(63, 2), line(1, 3), line(63, 4), line(63, 5), line(30, 6), line(40, 7))},
		{name: "newline fills buffers", f: nl, recs: keeps(line(63, 0), line(63, 1), line(63, 2), line(31, 3), line(31, 4), line(63, 5))},
		{name: "newline one over", f: nl, recs: []rec{{line(5, 0), keep}, {line(64, 1), skip}, {line(63, 2), keep}, {line(64, 3), skip}, {line(64, 4), skip}, {line(1, 5), keep}}},
		{name: "newline one over first", f: nl, recs: []rec{{line(64, 0), skip}, {line(63, 1), keep}}},
		{name: "newline long", f: nl, recs: []rec{{line(3, 0), keep}, {line(200, 1), skip}, {line(7, 2), keep}, {line(1000, 3), skip}, {line(0, 4), keep}, {line(127, 5), skip}, {line(128, 6), skip}, {line(62, 7), keep}}},
		{name: "newline tail", f: nl, recs: keeps(line(10, 0), line(30, 1)), tail: []byte("partial")},
		{name: "newline tail fills", f: nl, recs: keeps(line(10, 0)), tail: line(63, 1)[:63]},
		{name: "newline tail over", f: nl, recs: keeps(line(10, 0)), tail: line(64, 1)[:64], tailSkipped: true},
		{name: "newline tail long", f: nl, recs: keeps(line(10, 0)), tail: line(300, 1)[:300], tailSkipped: true},
		{name: "newline only tail", f: nl, tail: []byte("abc")},
		{name: "newline max", f: srcs.Newline{Max: 10}, recs: []rec{{line(10, 0), keep}, {line(11, 1), skip}, {line(0, 2), keep}, {line(63, 3), skip}, {line(64, 4), skip}, {line(9, 5), keep}, {line(12, 6), skip}}},
		{name: "newline max tail", f: srcs.Newline{Max: 10}, recs: keeps(line(3, 0)), tail: line(11, 1)[:11], tailSkipped: true},

		{name: "octet", f: srcs.OctetCounting{}, recs: keeps(octet(1, 0), octet(5, 1), octet(10, 2), octet(61, 3), octet(58, 4), octet(61, 5), octet(9, 6), octet(59, 7), octet(7, 8))},
		{name: "octet one over", f: srcs.OctetCounting{}, recs: []rec{{octet(5, 0), keep}, {octet(62, 1), skip}, {octet(61, 2), keep}, {octet(62, 3), skip}, {octet(62, 4), skip}, {octet(1, 5), keep}}},
		{name: "octet long", f: srcs.OctetCounting{}, recs: []rec{{octet(62, 0), skip}, {octet(3, 1), keep}, {octet(100, 2), skip}, {octet(5000, 3), skip}, {octet(7, 4), keep}, {octet(60, 5), keep}}},
		{name: "octet max", f: srcs.OctetCounting{Max: 8}, recs: []rec{{octet(8, 0), keep}, {octet(9, 1), skip}, {octet(1, 2), keep}, {octet(61, 3), skip}, {octet(8, 4), keep}}},
		{name: "octet tail", f: srcs.OctetCounting{}, recs: keeps(octet(20, 0)), tail: octet(30, 1)[:20]},
		{name: "octet tail length", f: srcs.OctetCounting{}, recs: keeps(octet(20, 0)), tail: []byte("12")},
		{name: "octet tail over", f: srcs.OctetCounting{}, recs: keeps(octet(20, 0)), tail: octet(300, 1)[:100], tailSkipped: true},
		{name: "octet malformed", f: srcs.OctetCounting{}, recs: []rec{{octet(20, 0), keep}, {octet(100, 0), skip}, {[]byte("05 hello"), fatal}, {octet(3, 0), keep}}, err: srcs.ErrMalformed},
		{name: "octet ten digits", f: srcs.OctetCounting{}, recs: []rec{{octet(20, 0), keep}, {[]byte("1234567890 "), fatal}}, err: srcs.ErrMalformed},

		{name: "mqtt", f: srcs.MQTTPackets{}, recs: keeps(mqttPkt(0x30, 0, 0), mqttPkt(0xc0, 0, 0), mqttPkt(0x32, 10, 1), mqttPkt(0x30, 62, 2), mqttPkt(0x30, 62, 3), mqttPkt(0x82, 7, 4), mqttPkt(0x30, 60, 5))},
		{name: "mqtt one over", f: srcs.MQTTPackets{}, recs: []rec{{mqttPkt(0x30, 5, 0), keep}, {mqttPkt(0x30, 63, 1), fatal}, {mqttPkt(0x30, 5, 2), keep}}, err: srcs.ErrTooLarge},
		{name: "mqtt long", f: srcs.MQTTPackets{}, recs: []rec{{mqttPkt(0x30, 61, 0), keep}, {mqttPkt(0x30, 300, 1), fatal}}, err: srcs.ErrTooLarge},
		{name: "mqtt max", f: srcs.MQTTPackets{Max: 4}, recs: []rec{{mqttPkt(0x30, 4, 0), keep}, {mqttPkt(0x30, 5, 1), fatal}}, err: srcs.ErrRecordTooLong},
		{name: "mqtt type 0", f: srcs.MQTTPackets{}, recs: []rec{{mqttPkt(0x30, 40, 0), keep}, {mqttPkt(0x00, 1, 1), fatal}}, err: srcs.ErrMalformed},
		{name: "mqtt fifth length byte", f: srcs.MQTTPackets{}, recs: []rec{{mqttPkt(0x30, 40, 0), keep}, {[]byte{0x30, 0x80, 0x80, 0x80, 0x80, 0}, fatal}}, err: srcs.ErrMalformed},
		{name: "mqtt refused", f: srcs.MQTTPackets{Check: refuseType(0xe)}, recs: []rec{{mqttPkt(0x30, 40, 0), keep}, {mqttPkt(0xd0, 0, 1), keep}, {mqttPkt(0xe0, 0, 2), fatal}}, err: errRefused},
		{name: "mqtt tail", f: srcs.MQTTPackets{}, recs: keeps(mqttPkt(0x30, 40, 0)), tail: []byte{0x30, 0x80}},
	}
	for _, size := range []int{1, 2, 4, 8} {
		for _, order := range []binary.ByteOrder{be, le} {
			f := srcs.LengthPrefix{Size: size, Order: order}
			r := func(n int, seed byte) []byte { return lenRec(size, order, n, seed) }
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
	stream := cat(line(3, 0), bytes.Repeat([]byte("x"), 200))
	for c := range forFeeds {
		got := runFeed(t, lazy{}, stream, c)
		var re *srcs.RecordError
		if !errors.As(got.err, &re) {
			t.Fatalf("%s: err = %v, want a *RecordError", c, got.err)
		}
		if re.Size != 64 || re.Max != 64 || re.Skip != 0 || re.Framer != "lazy" {
			t.Errorf("%s: %+v", c, *re)
		}
		if string(got.out) != string(line(3, 0)) {
			t.Errorf("%s: records %q", c, got.out)
		}
	}
}

func TestFramesScanError(t *testing.T) {
	// The bad record's bytes stay in the buffer after an error that ends
	// the lane: Done() marks where they begin.
	f := srcs.LengthPrefix{Size: 1, Order: binary.BigEndian}
	l := &srcs.Lane{Framer: f}
	var fr srcs.Frames
	fr.Reset(l)
	buf := make([]byte, 16)
	n := copy(buf, cat(lenRec(1, binary.BigEndian, 3, 0), []byte{200, 1, 2}))
	n, err := fr.Scan(buf, n)
	if !errors.Is(err, srcs.ErrRecordTooLong) || n != 7 || fr.Done() != 4 {
		t.Fatalf("Scan = %d, %v; Done() = %d", n, err, fr.Done())
	}
}

func TestFramesZero(t *testing.T) {
	var fr srcs.Frames
	if fr.On() || fr.Done() != 0 {
		t.Error("zero Frames is on")
	}
	fr.Reset(nil)
	if fr.On() {
		t.Error("Frames on after Reset(nil)")
	}
	fr.Reset(&srcs.Lane{})
	if fr.On() {
		t.Error("Frames on for a lane without a framer")
	}
	fr.Reset(&srcs.Lane{Framer: srcs.Newline{}})
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
		{srcs.Newline{Max: 4}, func(i int) ([]byte, bool) { return line(i%8, byte(i)), i%8 <= 4 }},
		{srcs.OctetCounting{Max: 4}, func(i int) ([]byte, bool) { return octet(i%8+1, byte(i)), i%8+1 <= 4 }},
	} {
		var stream, want []byte
		for i := range 20 {
			r, ok := tc.rec(i)
			stream = append(stream, r...)
			if ok {
				want = append(want, r...)
			}
		}
		var fr srcs.Frames
		fr.Reset(&srcs.Lane{Framer: tc.f})
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
		{srcs.Newline{}, line(100, 0)},
		{srcs.LengthPrefix{Size: 4, Order: be}, lenRec(4, be, 100, 0)},
		{srcs.OctetCounting{}, octet(100, 0)},
		{srcs.MQTTPackets{}, mqttPkt(0x30, 100, 0)},
	} {
		stream := bytes.Repeat(tc.rec, 50)
		l := &srcs.Lane{Framer: tc.f, Out: &recorder{}}
		var fr srcs.Frames
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
