package engine_test

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"sync/atomic"
	"testing"

	"github.com/sluice-io/sluice/srcs"
)

// Streams are told apart by the engine's source id, never by address:
// loopback reuses a closed connection's port at once (tcp_tw_reuse), so two
// connections of one test can carry the same name, and a collector keyed
// by name merges them. A test connection therefore says who it is in-band:
// its first bytes are a tag (for a framed stream, its first record holds
// one). The collectors key every stream by its source id, take the tag
// off the front of the stream, and let tests find the stream by the key
// the tag names. A stream without a tag (a file, a datagram socket, a
// client the engine dialled) is found by its name, which is unique there.
// So is a stream that ended before the engine read its tag: a test that
// may end a source that early (stopping it while reads are paused) waits
// for it by its source id.

// tagLen is the length of a tag: tagMagic, then eight hex digits.
const tagLen = 16

var (
	tagMagic = []byte("\x00sluice#")
	tagSeq   atomic.Uint64
)

// newTag returns a tag no other connection of the test binary carries,
// and the key a collector files its stream under.
func newTag() (tag []byte, key string) {
	tag = fmt.Appendf(nil, "%s%08x", tagMagic, tagSeq.Add(1))
	return tag, tagKey(tag)
}

func tagKey(tag []byte) string { return "conn#" + string(tag[len(tagMagic):tagLen]) }

// streamTag finds the tag at the start of a raw byte stream, which may
// arrive in pieces. Its zero value knows nothing yet.
type streamTag struct {
	head []byte // bytes seen while they may still be a tag
	key  string // "" until known
}

// feed takes the stream's next bytes, and returns those after the tag once
// the key is known (the key is the stream's name when it has no tag). end
// says the stream ends here.
func (st *streamTag) feed(p []byte, name string, end bool) []byte {
	if st.key != "" {
		return p
	}
	h := append(st.head, p...)
	n := min(len(h), len(tagMagic))
	switch {
	case !bytes.Equal(h[:n], tagMagic[:n]):
		st.key = name // not a tag
	case len(h) >= tagLen:
		st.key = tagKey(h)
		h = h[tagLen:]
	case end:
		st.key = name // too short to be a tag
	default:
		st.head = h
		return nil
	}
	st.head = nil
	return h
}

// recordTag returns the key named by a tag in the first record of a framed
// stream's first chunk, and the bytes of that record; "" and 0 when the
// record holds no tag.
func recordTag(f srcs.Framer, data []byte) (key string, n int) {
	k, err := f.Next(data, 0, math.MaxInt32)
	if err != nil || k == 0 {
		return "", 0
	}
	i := bytes.Index(data[:k], tagMagic)
	if i < 0 || i+tagLen > k {
		return "", 0
	}
	return tagKey(data[i:]), k
}

// dialTagged connects to addr, sends a tag (as one record made by encode,
// or raw when encode is nil), and returns the connection, with
// TCP_NODELAY, and the key collectors file its stream under.
func dialTagged(t testing.TB, addr string, encode func(dst, payload []byte) []byte) (*net.TCPConn, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tc := c.(*net.TCPConn)
	tc.SetNoDelay(true)
	tag, key := newTag()
	if encode != nil {
		tag = encode(nil, tag)
	}
	if _, err := tc.Write(tag); err != nil {
		tc.Close()
		t.Fatal(err)
	}
	return tc, key
}

func TestStreamTag(t *testing.T) {
	tag, key := newTag()
	for _, tc := range []struct {
		name   string
		pieces [][]byte
		end    bool
		key    string
		rest   string
	}{
		{"whole", [][]byte{append(append([]byte(nil), tag...), "data"...)}, false, key, "data"},
		{"byte by byte", func() [][]byte {
			var ps [][]byte
			for _, b := range append(append([]byte(nil), tag...), 'x') {
				ps = append(ps, []byte{b})
			}
			return ps
		}(), false, key, "x"},
		{"no tag", [][]byte{[]byte("plain bytes")}, false, "tcp://a", "plain bytes"},
		{"a tag's start, then other bytes", [][]byte{tag[:3], []byte("zz")}, false, "tcp://a", string(tag[:3]) + "zz"},
		{"a tag's start, then the end", [][]byte{tag[:5]}, true, "tcp://a", string(tag[:5])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st streamTag
			var rest []byte
			for i, p := range tc.pieces {
				rest = append(rest, st.feed(p, "tcp://a", tc.end && i == len(tc.pieces)-1)...)
			}
			if st.key != tc.key || string(rest) != tc.rest {
				t.Errorf("key %q rest %q, want %q %q", st.key, rest, tc.key, tc.rest)
			}
		})
	}
	for _, f := range framedCases() {
		rec := f.encode(nil, tag)
		rec = f.encode(rec, []byte("next"))
		if k, n := recordTag(f.framer, rec); k != key || n != len(f.encode(nil, tag)) {
			t.Errorf("%s: recordTag = %q, %d; want %q, %d", f.name, k, n, key, len(f.encode(nil, tag)))
		}
		if k, n := recordTag(f.framer, f.encode(nil, []byte("no tag here, just bytes"))); k != "" || n != 0 {
			t.Errorf("%s: recordTag of an untagged record = %q, %d", f.name, k, n)
		}
	}
}
