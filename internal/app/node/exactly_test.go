package node

import (
	"strings"
	"testing"
)

// TestSharedStateRefused: a node file in which two sources would keep
// one state, and so could take each other's message ids, is refused with
// the reason.
func TestSharedStateRefused(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"one mqtt session twice", `sources:
  - mqtt: {broker: 127.0.0.1:1883, client_id: a, topics: [x]}
  - mqtt: {broker: 127.0.0.1:1883, client_id: a, topics: [y]}
`, "sources[1].mqtt.client_id: \"a\": sources[0] has the session 127.0.0.1:1883/a already"},
		{"one checkpoint twice", `sources:
  - tail: {path: /var/log/a.log, checkpoint: /var/lib/sluice/ck}
  - tail: {path: /var/log/b.log, checkpoint: /var/lib/sluice/../sluice/ck}
`, "sources[1].tail.checkpoint: /var/lib/sluice/../sluice/ck: sources[0] keeps its checkpoint there already"},
		{"msg_id without jetstream", `sources:
  - udp: {addr: 127.0.0.1:0}
    msg_id: {field: id}
`, "sources[0].msg_id: applies to the jetstream output only"},
		{"msg_id on bytes", `sources:
  - tcp: {listen: 127.0.0.1:0}
    msg_id: {field: id}
output:
  jetstream: {subject: x}
`, "sources[0].msg_id: needs records: set framing"},
		{"user_property on 3.1.1", `sources:
  - mqtt: {broker: 127.0.0.1:1883, client_id: a, topics: [x]}
    msg_id: {user_property: id}
output:
  jetstream: {subject: x}
`, "sources[0].msg_id.user_property: needs an mqtt source with version: 5"},
		{"bad template", `sources:
  - udp: {addr: 127.0.0.1:0}
output:
  jetstream: {subject: x, mqtt_subject: "a.{topic}.b"}
`, "mqtt_subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("node.yaml", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDuplicateWindowNotes: check warns when the duplicate window is
// shorter than what the file says a redelivery can take, and says what
// each source gets.
func TestDuplicateWindowNotes(t *testing.T) {
	cfg, err := Parse("node.yaml", []byte(`sources:
  - mqtt: {broker: 127.0.0.1:1883, client_id: a, topics: [x], qos: 1, keep_alive: 60s}
  - tail: {path: /tmp/x.log, checkpoint: /tmp/x.ckpt}
    framing: newline
  - tcp: {listen: 127.0.0.1:0}
    framing: newline
output:
  jetstream: {subject: x, stream: S, duplicate_window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(jetStreamNotes(cfg), "\n")
	if !strings.Contains(notes, "duplicate_window: 1m0s is shorter than the 1m40s this node needs (ack_timeout + sources[0] mqtt: 1.5 x keep_alive + backoff.max)") {
		t.Errorf("notes: %s", notes)
	}
	for i, want := range []Guarantee{ExactlyOnce, ExactlyOnce, AtMostOnce} {
		if g, why := SourceGuarantee(cfg, cfg.Sources[i]); g != want {
			t.Errorf("sources[%d]: %s (%s), want %s", i, g, why, want)
		}
	}
	cfg.Output.JetStream.DuplicateWindow = 0 // the 2m default
	if notes := jetStreamNotes(cfg); len(notes) != 0 {
		t.Errorf("notes with a long enough window: %v", notes)
	}
}
