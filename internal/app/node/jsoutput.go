package node

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// jsOutput publishes what the node reads into JetStream as records: one
// message per record of a framed source (or per batch of a chunk's
// records, with records: batch), per datagram, per MQTT PUBLISH (its
// payload, on the subject its topic maps to, with its QoS, retain flag,
// packet id and topic in headers; the broker's control packets are not
// data), and per chunk of an unframed source. Each message's id is
// derived from what its source can replay, so that what a restarted node
// reads again is stored once (msgID says how).
type jsOutput struct {
	pub   *jetstream.Publisher
	cfg   jetstream.Config // defaults filled
	tpl   jetstream.Template
	batch bool

	scratch sync.Pool // *jsScratch
}

// jsScratch is what one chunk's messages are built in.
type jsScratch struct {
	msgs   []jetstream.Message
	fields []jetstream.Field
	ids    []byte
}

func newJSOutput(pub *jetstream.Publisher, cfg jetstream.Config) (*jsOutput, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	tpl, err := jetstream.ParseTemplate(cfg.MQTTSubject)
	if err != nil {
		return nil, err
	}
	return &jsOutput{pub: pub, cfg: cfg, tpl: tpl, batch: cfg.Records == jetstream.RecordsBatch}, nil
}

func (j *jsOutput) close(ctx context.Context) error { return j.pub.Close(ctx) }
func (j *jsOutput) records() bool                   { return true }

func (j *jsOutput) describe() string {
	return fmt.Sprintf("jetstream subject %s, mqtt subjects %s, records %s", j.cfg.Subject, j.tpl, j.cfg.Records)
}

// runPrefix is the prefix of the ids of a run's messages whose source
// cannot replay: the node file's id_prefix (or the host name) and the
// start time, so that no two runs share one.
func runPrefix(prefix string, start time.Time) string {
	if prefix == "" {
		prefix, _ = os.Hostname()
	}
	return prefix + "-" + strconv.FormatInt(start.UnixNano(), 36)
}

func (j *jsOutput) handle(en *entry, c engine.Chunk) {
	if len(c.Data) == 0 {
		c.Release()
		return
	}
	switch {
	case en != nil && en.cfg.MQTT != nil:
		j.publishMQTT(en, c)
	case c.Flags&srcs.Datagrams != 0:
		j.publishDatagrams(en, c)
	case c.Flags&srcs.Records != 0 && en != nil && en.framer != nil:
		j.publishRecords(en, c)
	default:
		j.pub.Handle(c)
	}
}

func (j *jsOutput) get() *jsScratch {
	if s, ok := j.scratch.Get().(*jsScratch); ok {
		return s
	}
	return &jsScratch{}
}

func (j *jsOutput) put(s *jsScratch) {
	clear(s.msgs)
	s.msgs, s.fields, s.ids = s.msgs[:0], s.fields[:0], s.ids[:0]
	j.scratch.Put(s)
}

// publish hands the messages built in s to the publisher.
func (j *jsOutput) publish(s *jsScratch, c engine.Chunk) {
	j.pub.Publish(c, s.msgs)
	j.put(s)
}

// add appends a message of data with the id the entry gives the record
// rec (its bytes as framed) at index i of the chunk, starting at byte off
// of its data, and fields as its headers.
func (s *jsScratch) add(subject, id string, data []byte, fields ...jetstream.Field) {
	k := len(s.fields)
	s.fields = append(s.fields, fields...)
	s.msgs = append(s.msgs, jetstream.Message{Subject: subject, ID: id, Data: data, Header: s.fields[k:len(s.fields):len(s.fields)]})
}

// runID returns the id of the i-th message of chunk c of a source that
// cannot replay: the run's prefix, the source, the chunk's sequence
// number, the message's index.
func (j *jsOutput) runID(s *jsScratch, c engine.Chunk, i int) string {
	b := s.ids[:0]
	b = append(b, j.pub.IDPrefix()...)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(c.Source), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(i), 10)
	s.ids = b
	return string(b)
}

// keyID returns the id a producer's key gives a message of en: the
// entry's namespace and the key, or "" when key is empty, too long or not
// a header's value.
func keyID(en *entry, key []byte) string {
	if len(key) == 0 || len(key) > maxKey || bytes.ContainsAny(key, "\r\n") {
		en.keyMissing.Add(1)
		return ""
	}
	return en.keyNS + string(key)
}

// maxKey bounds a producer's key: the server keeps every id of the
// duplicate window.
const maxKey = 256

// fieldKey returns the top-level field of a JSON object data names, as
// its text (a string without its quotes), or nil.
func fieldKey(data []byte, field string) []byte {
	r := gjson.GetBytes(data, gjson.Escape(field))
	switch r.Type {
	case gjson.String:
		return []byte(r.Str)
	case gjson.Number:
		return []byte(r.Raw)
	}
	return nil
}

func (j *jsOutput) publishMQTT(en *entry, c engine.Chunk) {
	s := j.get()
	mc := en.cfg.MQTT
	k := 0
	mqtt.ForEachMQTTMessage(c.Data, mc.Version, func(m mqtt.MQTTMessage) error {
		var id string
		switch key := en.cfg.MsgID; {
		case key != nil && key.UserProperty != "":
			v, _ := m.UserProperty(key.UserProperty)
			id = keyID(en, v)
		case key != nil && key.Field != "":
			id = keyID(en, fieldKey(m.Payload, key.Field))
		}
		if id == "" && en.mqttIDs != nil {
			id, _ = en.mqttIDs.ID(m)
		}
		if id == "" {
			id = j.runID(s, c, k)
		}
		k++
		f := [4]jetstream.Field{{Key: jetstream.HeaderMQTTTopic, Value: jetstream.HeaderTopic(m.Topic)},
			{Key: jetstream.HeaderMQTTQoS, Value: strconv.Itoa(int(m.QoS))}}
		n := 2
		if m.QoS > 0 {
			f[n] = jetstream.Field{Key: jetstream.HeaderMQTTPacketID, Value: strconv.Itoa(int(m.ID))}
			n++
		}
		if m.Retain {
			f[n] = jetstream.Field{Key: jetstream.HeaderMQTTRetain, Value: "true"}
			n++
		}
		s.add(j.tpl.Subject(m.Topic), id, m.Payload, f[:n]...)
		return nil
	})
	j.publish(s, c)
}

func (j *jsOutput) publishDatagrams(en *entry, c engine.Chunk) {
	s := j.get()
	k := 0
	srcs.ForEachDatagram(c.Data, func(p []byte) bool {
		id := ""
		if en != nil && en.cfg.MsgID != nil && en.cfg.MsgID.Field != "" {
			id = keyID(en, fieldKey(p, en.cfg.MsgID.Field))
		}
		if id == "" {
			id = j.runID(s, c, k)
		}
		k++
		s.add("", id, p)
		return true
	})
	j.publish(s, c)
}

// publishRecords publishes a framed chunk's records, each without its
// framing (a line without its newline, a record without its length).
// The part of a record its source never finished (a Truncated chunk's
// tail) goes as a message of its own marked Sluice-Records: truncated,
// but for a tail, which reads it again whole after a restart, and whose
// checkpoint never passes it.
func (j *jsOutput) publishRecords(en *entry, c engine.Chunk) {
	s := j.get()
	off, hasOff := c.Offset()
	var pos func(int64) (srcs.Position, bool)
	if en.tail != nil && en.cfg.Tail.Checkpoint != "" && hasOff {
		pos = en.tail.PositionAt
	}
	data, k := c.Data, 0
	var batch, ends []byte // records: batch: the body being built, and its records' ends
	batchAt, batchIdx, batchN := 0, 0, 0
	flush := func() {
		if batchN == 0 {
			return
		}
		id := j.recordID(s, en, c, batchAt, batchIdx, batchN, off, pos)
		s.add("", id, batch, jetstream.Field{Key: jetstream.HeaderRecordEnds, Value: string(ends)})
		batch, ends, batchN = nil, nil, 0
	}
	at := 0
	for at < len(data) {
		n, err := en.framer.Next(data[at:], 0, math.MaxInt32)
		if err != nil || n == 0 {
			break
		}
		body := recordBody(en.framer, data[at:at+n])
		switch {
		case j.batch:
			if batchN == 0 {
				batchAt, batchIdx = at, k
			} else {
				ends = append(ends, ',')
			}
			batch = append(batch, body...)
			ends = strconv.AppendInt(ends, int64(len(batch)), 10)
			if batchN++; batchN == maxBatch {
				flush()
			}
		default:
			id := ""
			if en.cfg.MsgID != nil && en.cfg.MsgID.Field != "" {
				id = keyID(en, fieldKey(body, en.cfg.MsgID.Field))
			}
			if id == "" {
				id = j.recordID(s, en, c, at, k, 0, off, pos)
			}
			s.add("", id, body)
		}
		k++
		at += n
	}
	flush()
	if at < len(data) && en.tail == nil {
		s.add("", j.runID(s, c, k), data[at:], jetstream.Field{Key: jetstream.HeaderRecords, Value: "truncated"})
	}
	j.publish(s, c)
}

// maxBatch bounds the records of one batch message.
const maxBatch = 1024

// recordID returns the id of the record at byte at of chunk c, the idx-th
// of the chunk (with n > 0, of the batch of n records from there): for a
// tail with a checkpoint, its file's identity and its offset in it, which
// a restarted tail reads again under the same id; otherwise the run's.
func (j *jsOutput) recordID(s *jsScratch, en *entry, c engine.Chunk, at, idx, n int, off int64, pos func(int64) (srcs.Position, bool)) string {
	if pos != nil {
		if p, ok := pos(off + int64(at)); ok && p.File != "" {
			b := s.ids[:0]
			b = append(b, "tail."...)
			b = append(b, p.File...)
			b = append(b, '.')
			b = strconv.AppendInt(b, p.Offset, 10)
			if n > 0 {
				b = append(b, '+')
				b = strconv.AppendInt(b, int64(n), 10)
			}
			s.ids = b
			return string(b)
		}
	}
	return j.runID(s, c, idx)
}

// recordBody returns a record without its framing.
func recordBody(f srcs.Framer, rec []byte) []byte {
	switch f := f.(type) {
	case srcs.Newline:
		return rec[:len(rec)-1]
	case srcs.LengthPrefix:
		return rec[f.Size:]
	case srcs.OctetCounting:
		if i := bytes.IndexByte(rec, ' '); i >= 0 {
			return rec[i+1:]
		}
	}
	return rec
}
