package mqtt_test

import (
	"errors"
	"testing"

	"github.com/sluice-io/sluice/internal/wire/mqtt"
)

var errBad = errors.New("bad")

var codec = mqtt.Codec{Malformed: errBad}

func TestPacketLen(t *testing.T) {
	for _, tt := range []struct {
		name      string
		p         []byte
		hl, n     int
		malformed bool
	}{
		{"empty", nil, 0, 0, false},
		{"header only", []byte{0x30}, 0, 0, false},
		{"whole", []byte{0xd0, 0x00}, 2, 2, false},
		{"cut short", []byte{0x30, 0x05, 0x00}, 2, 0, false},
		{"two-byte length", []byte{0x30, 0x80, 0x01}, 3, 0, false},
		{"type 0", []byte{0x00, 0x00}, 0, 0, true},
		{"five-byte length", []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, 0, 0, true},
	} {
		hl, n, err := codec.PacketLen(tt.p)
		if hl != tt.hl || n != tt.n || errors.Is(err, errBad) != tt.malformed {
			t.Errorf("%s: PacketLen = %d, %d, %v; want %d, %d, malformed %v", tt.name, hl, n, err, tt.hl, tt.n, tt.malformed)
		}
	}
}

func TestParsePublish(t *testing.T) {
	// QoS 1, topic "a/b", packet id 7, v5 properties: payload format 1.
	body := []byte{0x00, 0x03, 'a', '/', 'b', 0x00, 0x07, 0x02, 0x01, 0x01, 'h', 'i'}
	pub, err := codec.ParsePublish(0x32, body, 5)
	if err != nil {
		t.Fatal(err)
	}
	if pub.QoS != 1 || pub.ID != 7 || string(pub.Topic) != "a/b" || string(pub.Payload) != "hi" || len(pub.Props) != 2 {
		t.Errorf("ParsePublish = %+v", pub)
	}
	if _, err := codec.CheckProps(pub.Props, 3); err != nil {
		t.Errorf("CheckProps(payload format indicator) = %v", err)
	}
	if _, err := codec.CheckProps([]byte{0x11, 0, 0, 0, 1}, 3); !errors.Is(err, errBad) {
		t.Errorf("CheckProps(session expiry in a PUBLISH) = %v, want malformed", err)
	}
	if _, err := codec.ParsePublish(0x36, body, 4); !errors.Is(err, errBad) {
		t.Errorf("ParsePublish(QoS 3) = %v, want malformed", err)
	}
	if mqtt.ValidString([]byte("a\x00b")) || !mqtt.ValidString([]byte("a/b")) {
		t.Error("ValidString: a NUL is invalid, plain text valid")
	}
}

func TestUserProperty(t *testing.T) {
	// Content type "a", a user property k=v1, a topic alias, and a user
	// property id=42.
	props := []byte{0x03, 0, 1, 'a', 0x26, 0, 1, 'k', 0, 2, 'v', '1', 0x23, 0, 7, 0x26, 0, 2, 'i', 'd', 0, 2, '4', '2'}
	if _, err := codec.CheckProps(props, 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{{"id", "42", true}, {"k", "v1", true}, {"x", "", false}} {
		v, ok := codec.UserProperty(props, tc.name)
		if string(v) != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v", tc.name, v, ok)
		}
	}
	if _, ok := codec.UserProperty([]byte{0x26, 0, 5, 'i'}, "i"); ok {
		t.Error("a property cut short gave a value")
	}
	if _, ok := codec.UserProperty([]byte{0x7f, 0}, "i"); ok {
		t.Error("an unknown property gave a value")
	}
}
