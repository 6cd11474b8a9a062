package node

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/sluice-io/sluice/engine/jetstream"
)

// checkSharedState refuses two sources that would keep one state: two
// mqtt entries of one session (a broker and a client identifier: the
// broker hands the session to one at a time, and the message ids the
// jetstream output gives its messages depend on what the session sent
// before, so one entry's messages could take the other's ids and be
// dropped as duplicates), or two tails with one checkpoint file (each
// would resume where the other stopped, and give the other's stretches'
// identities to its own file).
func (f *file) checkSharedState() error {
	sessions := map[string]int{}
	checkpoints := map[string]int{}
	for i, s := range f.cfg.Sources {
		switch {
		case s.MQTT != nil && s.MQTT.ClientID != "":
			key := mqttSession(s.MQTT)
			if o, ok := sessions[key]; ok {
				return f.errorf([]any{"sources", i, "mqtt", "client_id"},
					"%q: sources[%d] has the session %s already: the broker keeps one connection a session, and two entries would mix up its messages", s.MQTT.ClientID, o, key)
			}
			sessions[key] = i
		case s.Tail != nil && s.Tail.Checkpoint != "":
			key := filepath.Clean(s.Tail.Checkpoint)
			if abs, err := filepath.Abs(key); err == nil {
				key = abs
			}
			if o, ok := checkpoints[key]; ok {
				return f.errorf([]any{"sources", i, "tail", "checkpoint"},
					"%s: sources[%d] keeps its checkpoint there already; each tail needs a file of its own", s.Tail.Checkpoint, o)
			}
			checkpoints[key] = i
		}
	}
	return nil
}

// Guarantee is what a source gets through the jetstream output across a
// node killed at any moment.
type Guarantee string

// The guarantees.
const (
	ExactlyOnce Guarantee = "exactly once"
	AtLeastOnce Guarantee = "at least once"
	AtMostOnce  Guarantee = "at most once"
)

// SourceGuarantee says what sources[i] of cfg gets through its jetstream
// output across a node killed at any moment, and why, for `sluice check`.
func SourceGuarantee(cfg Config, s Source) (Guarantee, string) {
	js := cfg.Output.JetStream
	keyed := s.MsgID != nil
	batch := js != nil && js.Records == jetstream.RecordsBatch
	switch {
	case s.MQTT != nil && s.MQTT.QoS == 0:
		return AtMostOnce, "qos 0: the broker never sends a message again"
	case s.MQTT != nil && s.MQTT.CleanSession:
		return AtMostOnce, "clean_session: the broker forgets what the node had not acknowledged when it reconnects"
	case s.MQTT != nil && keyed:
		return ExactlyOnce, "the producer's key is each message's id"
	case s.MQTT != nil:
		return ExactlyOnce, "what the broker sends again finds its id in the session's recent messages, read back from the stream (see docs/jetstream.md for the one case it cannot tell)"
	case s.Tail != nil && s.Tail.Checkpoint == "":
		if s.Tail.FromStart {
			return AtLeastOnce, "no checkpoint: a restart reads the file again from its start, under new ids"
		}
		return AtMostOnce, "no checkpoint: a restart starts at the file's end"
	case s.Tail != nil && s.Framing == "":
		return AtLeastOnce, "unframed: a restart cuts the bytes into other chunks, under new ids; set framing"
	case s.Tail != nil && batch && !keyed:
		return AtLeastOnce, "records: batch: a restart cuts the records into other batches"
	case s.Tail != nil:
		return ExactlyOnce, "each record's id is its file's stretch and its offset, which the checkpoint keeps"
	case keyed && !batch:
		return ExactlyOnce, "the sender's key is each record's id, as long as the sender sends again what the node had not stored"
	case s.File != nil:
		return AtLeastOnce, "a restart reads the file again, under new ids"
	}
	return AtMostOnce, "a socket's sender cannot be asked to send again: what the node had read and not stored is lost with it; a sender that sends again and puts a key in its records gets exactly once with msg_id"
}

// windowNeeded is the least duplicate window the jetstream output of cfg
// needs, from what the node file says: a message may be sent again an
// acknowledgement timeout after its first copy, and after a restart what
// a source gives again comes up to its own delay later (an MQTT broker's
// connection found dead and the reconnection's back-off; a tail's
// checkpoint interval). The time a node or a broker stays down comes on
// top, and only the operator knows it.
func windowNeeded(cfg Config) (time.Duration, string) {
	c := cfg.withDefaults()
	js := c.Output.JetStream
	need, why := js.AckTimeout, "ack_timeout"
	for i, s := range c.Sources {
		var d time.Duration
		var w string
		switch {
		case s.MQTT != nil && s.MQTT.QoS > 0:
			d = s.MQTT.KeepAlive*3/2 + s.MQTT.Backoff.Max
			w = fmt.Sprintf("sources[%d] mqtt: 1.5 x keep_alive + backoff.max", i)
		case s.Tail != nil && s.Tail.Checkpoint != "":
			d = s.Tail.CheckpointEvery
			w = fmt.Sprintf("sources[%d] tail: checkpoint_every", i)
		}
		if d > 0 && js.AckTimeout+d > need {
			need, why = js.AckTimeout+d, "ack_timeout + "+w
		}
	}
	return need, why
}

// jetStreamNotes are what `sluice check` says of a node file's jetstream
// output: a duplicate window shorter than the node needs.
func jetStreamNotes(cfg Config) []string {
	js := cfg.Output.JetStream
	if js == nil {
		return nil
	}
	window := js.DuplicateWindow
	if window == 0 {
		window = jetStreamDuplicateWindow
	}
	need, why := windowNeeded(cfg)
	var out []string
	if window < need {
		out = append(out, fmt.Sprintf("output.jetstream.duplicate_window: %v is shorter than the %v this node needs (%s), before the time a node or broker stays down: what is sent again later is stored twice (see docs/jetstream.md)",
			window, need, why))
	}
	if js.Stream == "" {
		out = append(out, fmt.Sprintf("output.jetstream: no stream named: the node needs the existing stream's duplicate window to be at least %v (%s), plus the longest a node or broker stays down", need, why))
	}
	return out
}
