package srcs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/internal/contract"
)

// Framing: records, not just bytes.
//
// A lane with a Framer is emitted in whole records. After every read the
// runner asks the framer where the last complete record in its buffer
// ends, emits the buffer up to there with the Records flag, and carries the
// incomplete tail into the start of the lane's next buffer, taken from the
// same account: only the tail is copied, never a whole record. A chunk of a
// framed lane therefore starts and ends on record boundaries, except the
// last chunk of a session that ended inside a record, which also has the
// Truncated flag.
//
// A record must fit in one pool buffer. One that cannot (longer than its
// framer's maximum, or than a buffer) is bad input: the runner reports it
// as a *RecordError and, as the framer says, either skips it and goes on
// (newline, octet counting) or ends the lane with the error (length
// prefixes, MQTT). Nothing else of the stream is lost.

// ErrRecordTooLong is wrapped by a *RecordError for a record longer than
// its framer's maximum or than a pool buffer.
var ErrRecordTooLong = errors.New("srcs: record too long")

// A Framer finds record boundaries in a byte stream. Framers are values
// without state: one may serve many lanes at once.
type Framer interface {
	// Next returns the length of the record at the start of p when p
	// holds all of it, or 0 when p holds only its beginning. p always
	// starts at a record boundary. The first seen bytes of p were passed
	// to an earlier call for the same record that returned 0, so a framer
	// that scans for a delimiter may skip them. limit is the longest
	// record the caller can hold (a pool buffer's size); a record that
	// cannot end within min(limit, the framer's maximum) is an error,
	// reported as soon as it is known: a *RecordError, or an error
	// wrapping ErrMalformed for a header that cannot be parsed.
	Next(p []byte, seen, limit int) (int, error)
	// String names the framer as ParseFraming reads it.
	String() string
}

// RecordError is a record that cannot be delivered whole.
type RecordError struct {
	Framer string
	// Size is the record's length when its header tells it, or a lower
	// bound (the bytes seen so far without the record's end).
	Size int64
	// Max is the longest record the lane could take: the framer's maximum
	// or the buffer size, whichever is smaller.
	Max int
	// Skip says how the lane goes on: SkipToBoundary (the runner drops
	// bytes until the framer's Resync finds a boundary), a count of bytes
	// to drop from the record's start, or 0 when the error ends the lane.
	Skip int64
	// Also is a second error the record is, besides ErrRecordTooLong (an
	// MQTT packet's ErrTooLarge); nil when none.
	Also error
}

// SkipToBoundary is RecordError.Skip for a record whose end only the
// framer's Resync can find.
const SkipToBoundary = -1

func (e *RecordError) Error() string {
	act := "skipped"
	if e.Skip == 0 {
		act = "the stream ends here"
	}
	return fmt.Sprintf("%v: %s record of %d bytes or more, above the %d-byte maximum (%s)", ErrRecordTooLong, e.Framer, e.Size, e.Max, act)
}

// Unwrap returns ErrRecordTooLong, and Also when set.
func (e *RecordError) Unwrap() []error {
	if e.Also != nil {
		return []error{ErrRecordTooLong, e.Also}
	}
	return []error{ErrRecordTooLong}
}

// Framed is the optional capability of sources whose stream comes in
// records: the engine frames their lanes with the Framer it returns
// (nil: raw bytes), unless the source was added with a framer of its own.
type Framed interface {
	Framer() Framer
}

// Limits of the framers.
const (
	// MaxOctetDigits bounds an octet-counting length field: nine digits,
	// a record of at most 999,999,999 bytes.
	MaxOctetDigits = 9
)

// ParseFraming reads a framer's name:
//
//	none                  raw bytes (returns nil)
//	newline[:MAX]         newline-delimited lines of at most MAX bytes before the '\n'
//	length:N{be,le}[:MAX] N-byte (1, 2, 4 or 8) length prefix, then MAX bytes at most
//	octet[:MAX]           RFC 6587 octet counting: "LEN SP MSG", MSG at most MAX bytes
//	mqtt[:MAX]            MQTT control packets, remaining length at most MAX
//
// MAX is a size such as 4096, 64KiB or 1MiB; without it a record may fill a
// pool buffer.
func ParseFraming(s string) (Framer, error) {
	kind, rest, _ := strings.Cut(s, ":")
	maxOf := func(spec string) (int, error) {
		if spec == "" {
			return 0, nil
		}
		v, err := parseSize(spec)
		if err != nil || v == 0 || v > math.MaxInt32 {
			return 0, fmt.Errorf("framing %q: maximum %q must be a size from 1 byte to 2147483647 bytes", s, spec)
		}
		return int(v), nil
	}
	switch kind {
	case "none", "":
		if rest != "" {
			return nil, fmt.Errorf("framing %q: none takes no parameter", s)
		}
		return nil, nil
	case "newline":
		m, err := maxOf(rest)
		return Newline{Max: m}, err
	case "octet":
		m, err := maxOf(rest)
		return OctetCounting{Max: m}, err
	case "mqtt":
		m, err := maxOf(rest)
		if err == nil && m > mqttMaxRemaining {
			err = fmt.Errorf("framing %q: MQTT remaining length is at most %d", s, mqttMaxRemaining)
		}
		return MQTTPackets{Max: m}, err
	case "length":
		spec, mx, _ := strings.Cut(rest, ":")
		if len(spec) < 3 {
			return nil, fmt.Errorf("framing %q: want length:N{be,le}, N 1, 2, 4 or 8", s)
		}
		n, err := strconv.Atoi(spec[:len(spec)-2])
		if err != nil || (n != 1 && n != 2 && n != 4 && n != 8) {
			return nil, fmt.Errorf("framing %q: prefix length must be 1, 2, 4 or 8 bytes", s)
		}
		var order binary.ByteOrder
		switch spec[len(spec)-2:] {
		case "be":
			order = binary.BigEndian
		case "le":
			order = binary.LittleEndian
		default:
			return nil, fmt.Errorf("framing %q: byte order must be be or le", s)
		}
		m, err := maxOf(mx)
		return LengthPrefix{Size: n, Order: order, Max: m}, err
	}
	return nil, fmt.Errorf("framing %q: unknown; want none, newline, length:N{be,le}, octet or mqtt", s)
}

// capMax returns the smaller of a framer's maximum (0: none) and limit.
func capMax(max, limit int) int {
	if max > 0 && max < limit {
		return max
	}
	return limit
}

// Newline frames newline-delimited records: a record is a line and its
// '\n'. A line longer than Max (or a record longer than a buffer) is
// skipped up to and including its newline, and reading goes on.
type Newline struct {
	// Max bounds a line's length without its '\n'; 0 means a pool buffer
	// less one byte.
	Max int
}

func (f Newline) String() string {
	if f.Max > 0 {
		return "newline:" + strconv.Itoa(f.Max)
	}
	return "newline"
}

// Next implements Framer.
func (f Newline) Next(p []byte, seen, limit int) (int, error) {
	mx := capMax(f.Max, limit-1) // a record is the line and its '\n'
	i := bytes.IndexByte(p[seen:], '\n')
	if i < 0 {
		if len(p) > mx {
			return 0, f.tooLong(len(p), mx)
		}
		return 0, nil
	}
	if n := seen + i; n > mx {
		return 0, f.tooLong(n, mx)
	}
	return seen + i + 1, nil
}

// Whole lets runners step over many lines at once (contract.WholeFramer). It finds p's first line as Next does.
// When that line is short, the others probably are too, and Whole returns
// every line up to the last '\n' it finds looking back from the end of
// p's first Max+1 bytes (the limit's, when Max is 0 or more than a
// buffer holds): no line within them can be too long. A long line costs
// little per byte to find on its own.
func (f Newline) Whole(p []byte, seen, limit int) (int, error) {
	n, err := f.Next(p, seen, limit)
	if n == 0 || n > shortLine {
		return n, err
	}
	end := min(len(p), capMax(f.Max, limit-1)+1)
	return n + lastByte(p[n:end], '\n') + 1, nil
}

// shortLine is the longest line Newline.Whole takes for short: one whose
// end costs more to find with bytes.IndexByte than its bytes do.
const shortLine = 256

// lastByte is bytes.LastIndexByte eight bytes at a time, which the
// standard library does one byte at a time.
func lastByte(p []byte, c byte) int {
	const ones, low7 = 0x0101010101010101, 0x7f7f7f7f7f7f7f7f
	pat := ones * uint64(c)
	i := len(p)
	for ; i >= 8; i -= 8 {
		v := binary.LittleEndian.Uint64(p[i-8:i]) ^ pat
		// The high bit of each byte of z is set where v's byte is 0, and
		// only there (no borrow crosses bytes).
		if z := ^((v&low7 + low7) | v | low7); z != 0 {
			return i - 8 + (63-bits.LeadingZeros64(z))/8
		}
	}
	for i--; i >= 0; i-- {
		if p[i] == c {
			return i
		}
	}
	return -1
}

func (f Newline) tooLong(size, mx int) error {
	return &RecordError{Framer: f.String(), Size: int64(size), Max: mx, Skip: SkipToBoundary}
}

// Resync lets runners skip a line too long (contract.Resyncer): the next boundary follows the next '\n'.
func (Newline) Resync(p []byte) (int, bool) {
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		return i + 1, true
	}
	return len(p), false
}

// LengthPrefix frames records that start with their length: Size bytes
// (1, 2, 4 or 8) in Order, then that many bytes. A length above Max (or a
// record longer than a buffer) ends the lane: a stream whose length field
// is wrong cannot be trusted past it.
type LengthPrefix struct {
	Size  int
	Order binary.ByteOrder
	// Max bounds the bytes after the prefix; 0 means a pool buffer less
	// the prefix.
	Max int
}

func (f LengthPrefix) String() string {
	o := "be"
	if f.Order == binary.LittleEndian {
		o = "le"
	}
	s := "length:" + strconv.Itoa(f.Size) + o
	if f.Max > 0 {
		s += ":" + strconv.Itoa(f.Max)
	}
	return s
}

// Next implements Framer.
func (f LengthPrefix) Next(p []byte, _, limit int) (int, error) {
	if len(p) < f.Size {
		return 0, nil
	}
	var v uint64
	switch f.Size {
	case 1:
		v = uint64(p[0])
	case 2:
		v = uint64(f.Order.Uint16(p))
	case 4:
		v = uint64(f.Order.Uint32(p))
	case 8:
		v = f.Order.Uint64(p)
	default:
		return 0, fmt.Errorf("srcs: framing %s: prefix length must be 1, 2, 4 or 8: %w", f, ErrMalformed)
	}
	mx := capMax(f.Max, limit-f.Size)
	if mx < 0 || v > uint64(mx) {
		size := int64(math.MaxInt64)
		if v < math.MaxInt64-8 {
			size = int64(v) + int64(f.Size)
		}
		return 0, &RecordError{Framer: f.String(), Size: size, Max: mx}
	}
	if n := f.Size + int(v); n <= len(p) {
		return n, nil
	}
	return 0, nil
}

// OctetCounting frames syslog messages as RFC 6587 section 3.4.1 sends
// them over TCP: "MSG-LEN SP SYSLOG-MSG", MSG-LEN a decimal count of the
// message's bytes without leading zeros. A message longer than Max (or
// than a buffer) is skipped by its count, and reading goes on; a length
// field that is not a number ends the lane with an error wrapping
// ErrMalformed.
type OctetCounting struct {
	// Max bounds a message's length, not counting the length field; 0
	// means what fits in a pool buffer.
	Max int
}

func (f OctetCounting) String() string {
	if f.Max > 0 {
		return "octet:" + strconv.Itoa(f.Max)
	}
	return "octet"
}

// Next implements Framer.
func (f OctetCounting) Next(p []byte, _, limit int) (int, error) {
	v, i := 0, 0
	for ; i < len(p); i++ {
		c := p[i]
		if c == ' ' {
			break
		}
		if c < '0' || c > '9' || (i == 0 && c == '0') || i == MaxOctetDigits {
			return 0, fmt.Errorf("srcs: framing %s: length field %q is not a count of 1 to %d digits: %w",
				f, p[:i+1], MaxOctetDigits, ErrMalformed)
		}
		v = v*10 + int(c-'0')
	}
	if i == len(p) {
		return 0, nil // the length field goes on
	}
	if i == 0 {
		return 0, fmt.Errorf("srcs: framing %s: empty length field: %w", f, ErrMalformed)
	}
	head := i + 1
	n := head + v
	if mx := capMax(f.Max, limit-head); v > mx {
		return 0, &RecordError{Framer: f.String(), Size: int64(n), Max: mx, Skip: int64(n)}
	}
	if n <= len(p) {
		return n, nil
	}
	return 0, nil
}

// Errors of malformed input, which framers and the MQTT source return.
var (
	// ErrMalformed marks bytes that break a protocol or a framing: an MQTT
	// packet the broker should not have sent (undecodable, or unexpected
	// in its place), or a record header a framer cannot parse.
	ErrMalformed = errors.New("srcs: malformed input")
	// ErrTooLarge marks an MQTT message larger than the configured
	// MaxMessage, or than a pool buffer can hold.
	ErrTooLarge = errors.New("srcs: message too large")
)

// mqttMaxRemaining is the MQTT protocol's largest remaining length.
const mqttMaxRemaining = 268435455

// MQTTPackets frames MQTT control packets by their fixed header: a type
// and flags byte, and the remaining length in one to four bytes. A
// remaining length above Max (or a packet longer than a buffer) ends the
// lane with a *RecordError wrapping ErrTooLarge as well as
// ErrRecordTooLong; a malformed header (packet type 0, a fifth length
// byte) with an error wrapping ErrMalformed.
type MQTTPackets struct {
	// Max bounds the remaining length; 0 means what fits in a buffer.
	Max int
	// Check, when set, vets each packet's first byte; an error ends the
	// lane. A subscriber uses it to refuse packets a broker must not send.
	Check func(header byte) error
}

func (f MQTTPackets) String() string {
	if f.Max > 0 {
		return "mqtt:" + strconv.Itoa(f.Max)
	}
	return "mqtt"
}

// Next implements Framer.
func (f MQTTPackets) Next(p []byte, _, limit int) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if p[0]>>4 == 0 {
		return 0, fmt.Errorf("srcs: framing %s: packet type 0 (header 0x%02x): %w", f, p[0], ErrMalformed)
	}
	if f.Check != nil {
		if err := f.Check(p[0]); err != nil {
			return 0, err
		}
	}
	rem, mul := 0, 1
	for i := 1; ; i++ {
		if i == 5 {
			return 0, fmt.Errorf("srcs: framing %s: remaining length longer than 4 bytes: %w", f, ErrMalformed)
		}
		if i >= len(p) {
			return 0, nil
		}
		rem += int(p[i]&0x7f) * mul
		mul <<= 7
		if p[i]&0x80 == 0 {
			n := i + 1 + rem
			if mx := capMax(f.Max, limit-(i+1)); rem > mx {
				return 0, &RecordError{Framer: f.String(), Size: int64(n), Max: mx, Also: ErrTooLarge}
			}
			if n <= len(p) {
				return n, nil
			}
			return 0, nil
		}
	}
}

// CountRecords returns the number of whole records f finds in p, which
// must start at a record boundary (a chunk with the Records flag), and the
// bytes they span.
func CountRecords(f Framer, p []byte) (records, n int, err error) {
	for n < len(p) {
		k, err := f.Next(p[n:], 0, math.MaxInt32)
		if err != nil || k == 0 {
			return records, n, err
		}
		records++
		n += k
	}
	return records, n, nil
}

var (
	_ Framer               = Newline{}
	_ contract.Resyncer    = Newline{}
	_ contract.WholeFramer = Newline{}
	_ Framer               = LengthPrefix{}
	_ Framer               = OctetCounting{}
	_ Framer               = MQTTPackets{}
)
