package node

import (
	"encoding/binary"
	"testing"

	"github.com/sluice-io/sluice/srcs"
)

// TestRecordBody: a record goes into JetStream without its framing.
func TestRecordBody(t *testing.T) {
	for _, tc := range []struct {
		f        srcs.Framer
		rec, out string
	}{
		{srcs.Newline{}, "hello\n", "hello"},
		{srcs.Newline{}, "\n", ""},
		{srcs.LengthPrefix{Size: 2, Order: binary.BigEndian}, "\x00\x03abc", "abc"},
		{srcs.OctetCounting{}, "5 hello", "hello"},
		{srcs.MQTTPackets{}, "\xd0\x00", "\xd0\x00"},
	} {
		if got := string(recordBody(tc.f, []byte(tc.rec))); got != tc.out {
			t.Errorf("%s %q: %q, want %q", tc.f, tc.rec, got, tc.out)
		}
	}
}

// TestProducerKeys: a producer's key comes from a top-level JSON field
// (a string's text, a number as written), and makes the id in the
// entry's namespace; a missing, empty, too long or multi-line key gives
// none, and is counted.
func TestProducerKeys(t *testing.T) {
	for _, tc := range []struct{ data, field, want string }{
		{`{"id":"a-1","v":2}`, "id", "a-1"},
		{`{"seq":42,"v":2}`, "seq", "42"},
		{`{"a.b":7}`, "a.b", "7"},
		{`{"nested":{"id":"x"}}`, "id", ""},
		{`{"id":null}`, "id", ""},
		{`not json`, "id", ""},
		{`{"id":"x\ny"}`, "id", "x\ny"},
	} {
		if got := string(fieldKey([]byte(tc.data), tc.field)); got != tc.want {
			t.Errorf("%s in %s: %q, want %q", tc.field, tc.data, got, tc.want)
		}
	}
	en := &entry{keyNS: "key.mqtt.b:1883."}
	if id := keyID(en, []byte("a-1")); id != "key.mqtt.b:1883.a-1" {
		t.Errorf("id %q", id)
	}
	for _, bad := range []string{"", "x\ny", string(make([]byte, maxKey+1))} {
		if id := keyID(en, []byte(bad)); id != "" {
			t.Errorf("key %q made id %q", bad, id)
		}
	}
	if n := en.keyMissing.Load(); n != 3 {
		t.Errorf("%d keys counted missing, want 3", n)
	}
}
