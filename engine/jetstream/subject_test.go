package jetstream

import (
	"bytes"
	"strings"
	"testing"
)

func TestTemplate(t *testing.T) {
	tpl, err := ParseTemplate("ingest.mqtt.{topic}")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ topic, subject string }{
		{"sensors/room1/temp", "ingest.mqtt.sensors.room1.temp"},
		{"sensors/room 1/t.c", "ingest.mqtt.sensors.room%201.t%2Ec"},
		{"/a//b/", "ingest.mqtt.%00.a.%00.b.%00"},
		{"$SYS/x*>%", "ingest.mqtt.$SYS.x%2A%3E%25"},
		{"température/ü", "ingest.mqtt.température.ü"},
		{"tab\there", "ingest.mqtt.tab%09here"},
	} {
		if got := tpl.Subject([]byte(tc.topic)); got != tc.subject {
			t.Errorf("%q: %q, want %q", tc.topic, got, tc.subject)
		}
	}
	if tpl.Filter() != "ingest.mqtt.>" || tpl.String() != "ingest.mqtt.{topic}" {
		t.Errorf("filter %q, string %q", tpl.Filter(), tpl.String())
	}
	bare, err := ParseTemplate("{topic}")
	if err != nil || bare.Subject([]byte("a/b")) != "a.b" || bare.Filter() != ">" {
		t.Errorf("{topic}: %v %q", err, bare.Subject([]byte("a/b")))
	}
	for _, bad := range []string{"", "ingest", "ingest.{topic}.raw", "ingest{topic}", "in gest.{topic}", "a..{topic}",
		"a.*.{topic}", "a.{topic}{topic}", "{x}.{topic}"} {
		if _, err := ParseTemplate(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzTemplate: every topic maps to a valid subject under the filter, and
// two different topics never to the same subject (MQTT topics hold no
// NUL, which the escape of an empty level spells).
func FuzzTemplate(f *testing.F) {
	f.Add([]byte("a/b"), []byte("a//b"))
	f.Add([]byte("a.b"), []byte("a%2Eb"))
	f.Add([]byte(""), []byte("/"))
	tpl, _ := ParseTemplate("in.{topic}")
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if bytes.IndexByte(a, 0) >= 0 || bytes.IndexByte(b, 0) >= 0 {
			return
		}
		sa, sb := tpl.Subject(a), tpl.Subject(b)
		if err := checkSubject(sa, false); err != nil {
			t.Fatalf("%q -> %q: %v", a, sa, err)
		}
		if !strings.HasPrefix(sa, "in.") || len(sa) == len("in.") {
			t.Fatalf("%q -> %q: not under in.>", a, sa)
		}
		if sa == sb && !bytes.Equal(a, b) {
			t.Fatalf("%q and %q both -> %q", a, b, sa)
		}
	})
}
