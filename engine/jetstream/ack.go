package jetstream

// JetStream acknowledges a stored publish with a small flat JSON object,
// {"stream":"INGEST","seq":42} or with "duplicate":true (and "domain" on
// some servers). Decoding each with encoding/json costs half of the
// publisher's allocations per message, so scanAck reads that shape alone
// and leaves anything else (an error, a nested value, an escaped string,
// malformed input) to encoding/json.

import "strings"

// scanAck reports whether b is a flat JSON object of string, number,
// boolean and null values without "error", and if so whether its "stream"
// is a non-empty string and its "duplicate" is true. ok is false when b
// needs encoding/json.
func scanAck(b []byte) (stream, duplicate, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false, false, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return false, false, skipSpace(b, i+1) == len(b)
	}
	var ack ackFields
	for {
		key, j, good := scanKey(b, i)
		if !good {
			return false, false, false
		}
		if i, good = ack.scanValue(b, j, string(key)); !good {
			return false, false, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false, false, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return ack.stream, ack.duplicate, skipSpace(b, i+1) == len(b)
		default:
			return false, false, false
		}
	}
}

// ackFields is what scanAck has read of the fields it checks.
type ackFields struct {
	stream, duplicate bool
}

// scanKey reads the key at b[i] and its colon, returning the key and the
// index of its value.
func scanKey(b []byte, i int) (key []byte, next int, good bool) {
	key, j, good := scanString(b, i)
	if !good {
		return nil, i, false
	}
	// encoding/json matches keys regardless of case.
	for _, k := range [...]string{"stream", "duplicate", "error"} {
		if string(key) != k && strings.EqualFold(string(key), k) {
			return nil, i, false
		}
	}
	j = skipSpace(b, j)
	if j >= len(b) || b[j] != ':' {
		return nil, i, false
	}
	j = skipSpace(b, j+1)
	return key, j, j < len(b)
}

// scanValue reads key's value at b[i], noting "stream" and "duplicate",
// and returns the index after it. good is false for a value of a type an
// acknowledgement does not give that key, and for an object or an array
// (encoding/json decides those).
func (a *ackFields) scanValue(b []byte, i int, key string) (next int, good bool) {
	switch c := b[i]; {
	case c == '"':
		val, j, good := scanString(b, i)
		switch {
		case !good || key == "duplicate" || key == "error":
			return i, false
		case key == "stream":
			a.stream = len(val) > 0
		}
		return j, true
	case c == 't' || c == 'f' || c == 'n':
		lit := "null"
		switch c {
		case 't':
			lit = "true"
		case 'f':
			lit = "false"
		}
		switch {
		case len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit:
			return i, false
		case key == "stream" || key == "error" || key == "duplicate" && c == 'n':
			return i, false
		case key == "duplicate":
			a.duplicate = c == 't'
		}
		return i + len(lit), true
	case c == '-' || c >= '0' && c <= '9':
		j := scanNumber(b, i)
		if j == i || key == "stream" || key == "duplicate" || key == "error" {
			return i, false
		}
		return j, true
	}
	return i, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the JSON string at b[i] without escapes or control
// characters, returning its contents and the index after its closing
// quote; good is false for anything else.
func scanString(b []byte, i int) (s []byte, next int, good bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, i, false // escapes and non-ASCII: encoding/json checks them
		}
	}
	return nil, i, false
}

// scanNumber returns the index after the JSON number at b[i], or i if
// there is none.
func scanNumber(b []byte, i int) int {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	default:
		return i
	}
	if j < len(b) && b[j] == '.' {
		k := j + 1
		for k < len(b) && b[k] >= '0' && b[k] <= '9' {
			k++
		}
		if k == j+1 {
			return i
		}
		j = k
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		k := j + 1
		if k < len(b) && (b[k] == '+' || b[k] == '-') {
			k++
		}
		m := k
		for m < len(b) && b[m] >= '0' && b[m] <= '9' {
			m++
		}
		if m == k {
			return i
		}
		j = m
	}
	return j
}
