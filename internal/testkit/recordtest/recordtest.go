// Package recordtest holds what the framing tests of srcs and of the lane
// driver share: records of every framing to build test streams from, and
// Ref and Model, a reference decoder written from the framing rules rather
// than from the framers' code, to check them against. Only tests import it.
package recordtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/sluice-io/sluice/srcs"
)

// ErrRefused is what the MQTT Check callbacks of these tests return.
var ErrRefused = errors.New("test: packet type refused")

// RefuseType returns an MQTTPackets.Check that refuses one packet type.
func RefuseType(typ byte) func(byte) error {
	return func(h byte) error {
		if h>>4 == typ {
			return fmt.Errorf("header 0x%02x: %w", h, ErrRefused)
		}
		return nil
	}
}

// Records of the tests. The payloads of the counted and prefixed framings
// hold every byte value, '\n' and ' ' included, to show that those framers
// never look inside a record.

// Line returns a newline record: n bytes of text and '\n'.
func Line(n int, seed byte) []byte {
	b := make([]byte, n+1)
	for i := range n {
		b[i] = 'a' + byte((int(seed)+i)%26)
	}
	b[n] = '\n'
	return b
}

// Payload returns n bytes that differ from record to record.
func Payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// Octet returns an RFC 6587 octet-counted record of an n-byte message.
func Octet(n int, seed byte) []byte {
	return append([]byte(strconv.Itoa(n)+" "), Payload(n, seed)...)
}

// Prefix returns the size-byte length field for v.
func Prefix(size int, order binary.ByteOrder, v uint64) []byte {
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

// LenRec returns a length-prefixed record of n payload bytes.
func LenRec(size int, order binary.ByteOrder, n int, seed byte) []byte {
	return append(Prefix(size, order, uint64(n)), Payload(n, seed)...)
}

// AppendVarint appends v as an MQTT remaining length.
func AppendVarint(dst []byte, v int) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

// MQTTPkt returns an MQTT packet with header byte hdr and n bytes after
// the fixed header.
func MQTTPkt(hdr byte, n int, seed byte) []byte {
	return append(AppendVarint([]byte{hdr}, n), Payload(n, seed)...)
}

// Cat joins records into a stream.
func Cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// What Ref makes of the bytes at a record boundary.
const (
	RefOK        = iota // a whole record of n bytes
	RefMore             // the beginning of a record that fits
	RefLong             // a record that does not fit
	RefMalformed        // a header that cannot be parsed
	RefRefused          // a packet MQTTPackets.Check refuses
)

// RefResult is what Ref makes of the bytes at a record boundary.
type RefResult struct {
	Kind int
	N    int // RefOK: the record's length
	// RefLong: the *RecordError expected: Size from SizeLo to SizeHi,
	// and Max and Skip exactly.
	SizeLo, SizeHi int64
	Max            int
	Skip           int64
}

// fits reports whether a record of overhead+payload bytes fits limit and
// the framer's max (0: none). Its arguments may be far above MaxInt.
func fits(overhead int, payload uint64, limit, max int) bool {
	if max > 0 && payload > uint64(max) {
		return false
	}
	return payload <= uint64(limit) && uint64(overhead)+payload <= uint64(limit)
}

// payloadMax is the largest Payload after overhead bytes that fits limit
// and max.
func payloadMax(overhead, limit, max int) int {
	m := limit - overhead
	if max > 0 && max < m {
		m = max
	}
	return m
}

// Ref decodes the record at the start of p, as the framing rules say f
// must, for a caller that can hold limit bytes.
func Ref(f srcs.Framer, p []byte, limit int) RefResult {
	long := func(size int64, overhead, max int, skip int64) RefResult {
		return RefResult{Kind: RefLong, SizeLo: size, SizeHi: size, Max: payloadMax(overhead, limit, max), Skip: skip}
	}
	switch f := f.(type) {
	case srcs.Newline:
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			// The Line is len(p) bytes or more, and needs its '\n'.
			if !fits(1, uint64(len(p)), limit, f.Max) {
				return long(int64(len(p)), 1, f.Max, srcs.SkipToBoundary)
			}
			return RefResult{Kind: RefMore}
		}
		if !fits(1, uint64(i), limit, f.Max) {
			return long(int64(i), 1, f.Max, srcs.SkipToBoundary)
		}
		return RefResult{Kind: RefOK, N: i + 1}

	case srcs.LengthPrefix:
		if len(p) < f.Size {
			return RefResult{Kind: RefMore}
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
				r.SizeLo, r.SizeHi = math.MaxInt64-8, math.MaxInt64
			}
			return r
		}
		if n := f.Size + int(v); n <= len(p) {
			return RefResult{Kind: RefOK, N: n}
		}
		return RefResult{Kind: RefMore}

	case srcs.OctetCounting:
		i := bytes.IndexByte(p, ' ')
		field := p
		if i >= 0 {
			field = p[:i]
		}
		for j, c := range field {
			if c < '0' || c > '9' || j == 0 && c == '0' || j == srcs.MaxOctetDigits {
				return RefResult{Kind: RefMalformed}
			}
		}
		switch {
		case i < 0:
			return RefResult{Kind: RefMore}
		case i == 0:
			return RefResult{Kind: RefMalformed}
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
			return RefResult{Kind: RefOK, N: int(n)}
		}
		return RefResult{Kind: RefMore}

	case srcs.MQTTPackets:
		if len(p) == 0 {
			return RefResult{Kind: RefMore}
		}
		if p[0] < 0x10 {
			return RefResult{Kind: RefMalformed}
		}
		if f.Check != nil && f.Check(p[0]) != nil {
			return RefResult{Kind: RefRefused}
		}
		var rem uint64
		for i := 1; i <= 4; i++ {
			if i >= len(p) {
				return RefResult{Kind: RefMore}
			}
			rem |= uint64(p[i]&0x7f) << (7 * (i - 1))
			if p[i] < 0x80 {
				n := int64(i+1) + int64(rem)
				if !fits(i+1, rem, limit, f.Max) {
					return long(n, i+1, f.Max, 0)
				}
				if n <= int64(len(p)) {
					return RefResult{Kind: RefOK, N: int(n)}
				}
				return RefResult{Kind: RefMore}
			}
		}
		return RefResult{Kind: RefMalformed}
	}
	panic("Ref: unknown framer")
}

// KindOf classifies what Next returned as Ref does.
func KindOf(n int, err error) int {
	var re *srcs.RecordError
	switch {
	case err == nil && n > 0:
		return RefOK
	case err == nil:
		return RefMore
	case errors.As(err, &re):
		return RefLong
	case errors.Is(err, ErrRefused):
		return RefRefused
	case errors.Is(err, srcs.ErrMalformed):
		return RefMalformed
	}
	return -1
}

// Expect is what a framed lane must deliver of a stream.
type Expect struct {
	Out     []byte
	Tail    []byte
	Skipped []RefResult // the *RecordErrors reported, in order
	Err     error       // what ends the lane (errors.Is); nil: nothing
}

// Model runs Ref over a stream the way a framed lane frames it in buffers of
// bufSize bytes: records that fit are delivered, records too long are
// skipped when the framer can (Newline to the next '\n', OctetCounting by
// the count) and end the lane otherwise, and the stream may end inside a
// record that fits.
func Model(f srcs.Framer, s []byte, bufSize int) Expect {
	var e Expect
	for len(s) > 0 {
		r := Ref(f, s, bufSize)
		switch r.Kind {
		case RefOK:
			e.Out = append(e.Out, s[:r.N]...)
			s = s[r.N:]
		case RefMore:
			e.Tail = s
			return e
		case RefLong:
			switch {
			case r.Skip == srcs.SkipToBoundary:
				// A lane may report the line as soon as it holds more
				// bytes than the maximum.
				i := bytes.IndexByte(s, '\n')
				r.SizeLo, r.SizeHi = int64(r.Max)+1, int64(len(s))
				if i >= 0 {
					r.SizeHi = int64(i)
				}
				e.Skipped = append(e.Skipped, r)
				if i < 0 {
					return e
				}
				s = s[i+1:]
			case r.Skip > 0:
				e.Skipped = append(e.Skipped, r)
				s = s[min(r.Skip, int64(len(s))):]
			default:
				e.Err = srcs.ErrRecordTooLong
				if _, ok := f.(srcs.MQTTPackets); ok {
					e.Err = srcs.ErrTooLarge
				}
				return e
			}
		case RefMalformed:
			e.Err = srcs.ErrMalformed
			return e
		case RefRefused:
			e.Err = ErrRefused
			return e
		}
	}
	return e
}

// Cut drops the last k%len(s) bytes of s, to end the stream inside a
// record.
func Cut(s []byte, k uint16) []byte {
	if len(s) == 0 {
		return s
	}
	return s[:len(s)-int(k)%len(s)]
}

// Lengths maps a fuzz byte to a record length: mostly around the buffer
// sizes, sometimes many buffers long.
func Lengths(b byte) int {
	if b < 0xf0 {
		return int(b)
	}
	return int(b-0xef) * 400
}

// Max1 is n, or 1 if n is less.
func Max1(n int) int { return max(n, 1) }
