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
	for {
		// A key.
		key, j, good := scanString(b, i)
		if !good {
			return false, false, false
		}
		// encoding/json matches keys regardless of case.
		for _, k := range [...]string{"stream", "duplicate", "error"} {
			if string(key) != k && strings.EqualFold(string(key), k) {
				return false, false, false
			}
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false, false, false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return false, false, false
		}
		// Its value.
		switch c := b[i]; {
		case c == '"':
			val, j, good := scanString(b, i)
			if !good {
				return false, false, false
			}
			switch string(key) {
			case "stream":
				stream = len(val) > 0
			case "duplicate", "error":
				return false, false, false // not a string in an acknowledgement
			}
			i = j
		case c == 't' || c == 'f' || c == 'n':
			var lit string
			switch c {
			case 't':
				lit = "true"
			case 'f':
				lit = "false"
			default:
				lit = "null"
			}
			if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
				return false, false, false
			}
			switch string(key) {
			case "duplicate":
				if c == 'n' {
					return false, false, false
				}
				duplicate = c == 't'
			case "stream", "error":
				return false, false, false
			}
			i += len(lit)
		case c == '-' || c >= '0' && c <= '9':
			j := scanNumber(b, i)
			if j == i {
				return false, false, false
			}
			switch string(key) {
			case "stream", "duplicate", "error":
				return false, false, false
			}
			i = j
		default:
			return false, false, false // an object or an array: encoding/json decides
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false, false, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return stream, duplicate, skipSpace(b, i+1) == len(b)
		default:
			return false, false, false
		}
	}
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
