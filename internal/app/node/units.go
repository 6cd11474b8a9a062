package node

import (
	"bytes"
	"cmp"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"
)

// byteKeys are the node file's keys whose values are byte counts. Besides
// a whole number they take a size with a unit, as people write them:
// 64KiB, 1 MiB, 256KB (SI units are powers of 1000, IEC ones of 1024).
var byteKeys = map[string]bool{
	"buf_size": true, "max_pool_bytes": true, // engine
	"recv_buffer": true, "read_buffer": true, // tcp and udp sources
	"max_datagram": true, "max_message": true, "offset": true,
	"bytes_per_second": true, "burst": true, // rate limits
}

// byteUnitsHint is how an error says what a byte count may look like.
const byteUnitsHint = "write it like 65536, 64KiB or 1MiB"

// expandByteUnits rewrites the sizes with units that byteKeys' values
// give into whole numbers, and a bare 0 given for a duration into 0s, in
// place in data (a value's line never moves,
// so the decoder's errors keep their lines), and returns the data to
// decode. A value that is neither a whole number nor a size is an error
// naming its key.
func (f *file) expandByteUnits(data []byte) ([]byte, error) {
	type edit struct {
		line, col int // the value's, 1-based
		raw, num  string
	}
	var edits []edit
	var bad error
	var walk func(n *yaml.Node, path []any)
	walk = func(n *yaml.Node, path []any) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, append(path[:len(path):len(path)], i))
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := append(path[:len(path):len(path)], k.Value)
				if byteKeys[k.Value] && v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
					num, ok := parseByteCount(v.Value)
					if !ok {
						if bad == nil {
							bad = f.errorf(p, "%s is not a byte count (%s)", strconv.Quote(v.Value), byteUnitsHint)
						}
						continue
					}
					edits = append(edits, edit{v.Line, v.Column, rawScalar(v), num})
					continue
				}
				if v.Kind == yaml.ScalarNode && v.Tag == "!!int" && isZero(v.Value) && typeAt(reflect.TypeFor[Config](), p) == durationType {
					// A bare 0 is zero, as the reference's "Default 0"
					// writes it; the decoder takes only durations with
					// a unit.
					edits = append(edits, edit{v.Line, v.Column, rawScalar(v), "0s"})
					continue
				}
				walk(v, p)
			}
		}
	}
	walk(f.root, nil)
	if bad != nil || len(edits) == 0 {
		return data, bad
	}
	// Right to left on each line: a rewritten value changes the length of
	// its line, and the columns of the values after it on that line are
	// the file's as written.
	slices.SortStableFunc(edits, func(a, b edit) int {
		return cmp.Or(cmp.Compare(a.line, b.line), cmp.Compare(b.col, a.col))
	})
	lines := bytes.SplitAfter(data, []byte("\n"))
	for _, e := range edits {
		if e.line < 1 || e.line > len(lines) {
			continue
		}
		ln := string(lines[e.line-1])
		at := runeOffset(ln, e.col-1)
		if at < 0 || !strings.HasPrefix(ln[at:], e.raw) {
			continue // not as written (escapes): the decoder says what it wants
		}
		lines[e.line-1] = []byte(ln[:at] + e.num + ln[at+len(e.raw):])
	}
	return bytes.Join(lines, nil), nil
}

// durationType is time.Duration's type: the node file's durations.
var durationType = reflect.TypeFor[time.Duration]()

// isZero says whether a YAML integer is zero (0, +0, 0x0, ...).
func isZero(s string) bool {
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	return err == nil && v == 0
}

// parseByteCount reads a size with a unit as a whole number of bytes.
func parseByteCount(s string) (string, bool) {
	v, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil || v > math.MaxInt64 {
		return "", false
	}
	return strconv.FormatUint(v, 10), true
}

// rawScalar is how a plain or simply quoted scalar is written.
func rawScalar(n *yaml.Node) string {
	switch n.Style {
	case yaml.DoubleQuotedStyle:
		return `"` + n.Value + `"`
	case yaml.SingleQuotedStyle:
		return "'" + n.Value + "'"
	}
	return n.Value
}

// runeOffset is the byte offset of the col-th character of s (0-based),
// or -1 past its end.
func runeOffset(s string, col int) int {
	for i := range s {
		if col == 0 {
			return i
		}
		col--
	}
	return -1
}
