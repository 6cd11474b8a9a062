package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/srcs/mqtt"
)

// Headers of the messages made of MQTT messages.
const (
	HeaderMQTTTopic    = "Mqtt-Topic"     // the message's topic, unescaped
	HeaderMQTTQoS      = "Mqtt-Qos"       // 0, 1 or 2, as the broker delivered it
	HeaderMQTTRetain   = "Mqtt-Retain"    // "true" on a retained message; absent otherwise
	HeaderMQTTPacketID = "Mqtt-Packet-Id" // the broker's packet identifier, at QoS 1 and 2
)

// MQTTIDs gives the messages of one MQTT session (a broker and a client
// identifier) message ids that the broker's redelivery of a message finds
// again, across a restart of the node too, when the producer put no key
// of its own in them.
//
// A broker sends a QoS 1 or 2 message again, under the packet identifier
// it had, until the subscriber acknowledges it: after a reconnect, after
// the subscriber's restart, and after its own restart from a store saved
// before the acknowledgement (then possibly without the DUP flag). A
// packet identifier names a message only while it is in flight: the
// broker reuses it once the message is acknowledged, and a broker
// restored from its store reuses the ones it gave since the save. So
// MQTTIDs keeps, per packet identifier, the id it last gave and a hash of
// what that message held (topic, payload, QoS, retain): a message with
// the identifier and the same content gets that id again, and any other a
// new random one. The state lives with the data: every message carries
// its packet identifier and topic in headers, and Load reads the recent
// ones back from the stream when the node starts.
//
// What it cannot tell apart: a new message with the topic, payload, QoS
// and retain flag of the last message the broker gave the same packet
// identifier, within the duplicate window, is taken for a redelivery and
// stored once. A broker gives an identifier again only after the earlier
// message was acknowledged, so that needs a producer that repeats a
// payload to a topic; a producer key (a user property or a payload field,
// which the node file names) tells those apart. Redeliveries counts what
// was taken for one.
//
// MQTTIDs is safe for concurrent use.
type MQTTIDs struct {
	prefix string
	seed   maphash.Seed

	mu   sync.Mutex
	last map[uint16]mqttSeen

	redeliveries atomic.Uint64
}

type mqttSeen struct {
	id  string
	sum uint64
}

// NewMQTTIDs returns the ids of the session named session (the broker's
// address and the client identifier).
func NewMQTTIDs(session string) *MQTTIDs {
	h := fnv.New64a()
	h.Write([]byte(session))
	return &MQTTIDs{prefix: "mqtt." + strconv.FormatUint(h.Sum64(), 36) + ".", seed: maphash.MakeSeed(),
		last: map[uint16]mqttSeen{}}
}

// Prefix returns what every id MQTTIDs gives starts with.
func (s *MQTTIDs) Prefix() string { return s.prefix }

// Redeliveries counts the messages given the id of an earlier one.
func (s *MQTTIDs) Redeliveries() uint64 { return s.redeliveries.Load() }

// ID returns the message id of m, and whether it is a redelivery of a
// message that had it.
func (s *MQTTIDs) ID(m mqtt.MQTTMessage) (string, bool) {
	if m.QoS == 0 {
		return s.fresh(), false
	}
	sum := s.sum(m.Topic, m.Payload, m.QoS, m.Retain)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.last[m.ID]; ok && e.sum == sum {
		s.redeliveries.Add(1)
		return e.id, true
	}
	id := s.fresh()
	s.last[m.ID] = mqttSeen{id, sum}
	return id, false
}

func (s *MQTTIDs) fresh() string {
	var b [64]byte
	out := append(b[:0], s.prefix...)
	out = strconv.AppendUint(out, rand.Uint64(), 36)
	out = append(out, '.')
	out = strconv.AppendUint(out, rand.Uint64()>>16, 36)
	return string(out)
}

func (s *MQTTIDs) sum(topic, payload []byte, qos byte, retain bool) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	var n [10]byte
	n[0], n[1] = qos, 0
	if retain {
		n[1] = 1
	}
	l := len(topic)
	n[2], n[3], n[4], n[5] = byte(l), byte(l>>8), byte(l>>16), byte(l>>24)
	h.Write(n[:6])
	h.Write(topic)
	h.Write(payload)
	return h.Sum64()
}

// HeaderTopic returns topic as the Mqtt-Topic header holds it: as it is,
// or quoted as Go quotes strings (strconv.Quote) when a header could not
// carry it unchanged (control characters, white space at either end, a
// leading quote).
func HeaderTopic(topic []byte) string {
	n := len(topic)
	quote := n > 0 && (topic[0] == '"' || topic[0] == ' ' || topic[n-1] == ' ' || topic[0] == '\t' || topic[n-1] == '\t')
	for _, c := range topic {
		quote = quote || c < 0x20 || c == 0x7f
	}
	if quote {
		return strconv.Quote(string(topic))
	}
	return string(topic)
}

// topicOfHeader reads the Mqtt-Topic header back.
func topicOfHeader(v string) string {
	if strings.HasPrefix(v, `"`) {
		if t, err := strconv.Unquote(v); err == nil {
			return t
		}
	}
	return v
}

// note records a message read back from the stream, as ID would have.
func (s *MQTTIDs) note(id string, packetID uint16, topic, payload []byte, qos byte, retain bool) {
	sum := s.sum(topic, payload, qos, retain)
	s.mu.Lock()
	s.last[packetID] = mqttSeen{id, sum}
	s.mu.Unlock()
}

// LoadMQTTIDs reads back, from the stream that holds subjects matching
// filter, the messages of every session of ids stored within the
// stream's duplicate window of now, oldest first, so that each id's
// packet identifiers are known as they were when the node stopped. The
// stream is Config.Stream, or the one that holds filter. It returns how
// many messages it read.
func (p *Publisher) LoadMQTTIDs(ctx context.Context, filter string, ids ...*MQTTIDs) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	js, err := jetstream.New(p.nc)
	if err != nil {
		return 0, fmt.Errorf("jetstream: %w", err)
	}
	name := p.cfg.Stream
	if name == "" {
		if name, err = js.StreamNameBySubject(ctx, filter); err != nil {
			return 0, fmt.Errorf("jetstream: the stream of %s: %w", filter, err)
		}
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("jetstream: stream %s: %w", name, err)
	}
	info := st.CachedInfo()
	window := info.Config.Duplicates
	if window <= 0 {
		window = 2 * time.Minute
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	start := time.Now().Add(-window - time.Minute) // a margin for clocks
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter},
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start})
	if err != nil {
		return 0, fmt.Errorf("jetstream: read back %s: %w", name, err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("jetstream: read back %s: %w", name, err)
	}
	read := 0
	for left := ci.NumPending; left > 0; {
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		batch, err := cons.Fetch(int(min(left, 1000)), jetstream.FetchContext(fctx))
		if err != nil {
			fcancel()
			return read, fmt.Errorf("jetstream: read back %s: %w", name, err)
		}
		for m := range batch.Messages() {
			read++
			left--
			if md, err := m.Metadata(); err == nil && md.NumPending < left {
				left = md.NumPending
			}
			h := m.Headers()
			id := h.Get(jetstream.MsgIDHeader)
			for _, s := range ids {
				if !strings.HasPrefix(id, s.prefix) {
					continue
				}
				pid, err := strconv.ParseUint(h.Get(HeaderMQTTPacketID), 10, 16)
				qos, err2 := strconv.ParseUint(h.Get(HeaderMQTTQoS), 10, 8)
				if err == nil && err2 == nil && qos > 0 {
					s.note(id, uint16(pid), []byte(topicOfHeader(h.Get(HeaderMQTTTopic))), m.Data(), byte(qos), h.Get(HeaderMQTTRetain) == "true")
				}
			}
		}
		err = batch.Error()
		fcancel()
		if err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return read, fmt.Errorf("jetstream: read back %s: %w", name, err)
		}
		if ctx.Err() != nil {
			return read, ctx.Err()
		}
	}
	return read, nil
}
