package node

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// jetStreamDuplicateWindow is the de-duplication window JetStream gives a
// stream created without one.
const jetStreamDuplicateWindow = 2 * time.Minute

// withDefaults returns c with the zero fields of its sources, output and
// engine set to the values the node runs with, as the code that applies
// each default fills it: the pool's per-source cap and size limit, a
// listener's handshake limits, a client's dial timeout and backoff, an
// MQTT session's protocol version, keep-alive and message limit, the
// JetStream publisher's window and timeouts. It copies what it changes,
// so c is left as it was. Fields whose default depends on the moment
// (JetStream's id_prefix) stay empty.
func (c Config) withDefaults() Config {
	if rc, err := c.Engine.Resolved(); err == nil {
		c.Engine = rc
	}
	if pc, err := (pool.Config{BufSize: c.Engine.BufSize, Buffers: c.Engine.Buffers,
		MaxPerSource: c.Engine.MaxPerSource, MaxBytes: c.Engine.MaxPoolBytes}).Validate(); err == nil {
		c.Engine.MaxPerSource, c.Engine.MaxPoolBytes = pc.MaxPerSource, pc.MaxBytes
	}
	c.Sources = append([]Source(nil), c.Sources...)
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.RateLimit != nil && s.RateLimit.Burst < int64(c.Engine.BufSize) {
			// The least burst a source is given: one buffer.
			rl := *s.RateLimit
			rl.Burst = int64(c.Engine.BufSize)
			s.RateLimit = &rl
		}
		switch {
		case s.TCP != nil:
			l := *s.TCP
			l.ListenerConfig = listenerDefaults(l.ListenerConfig)
			s.TCP = &l
		case s.Unix != nil:
			l := *s.Unix
			l.ListenerConfig = listenerDefaults(l.ListenerConfig)
			s.Unix = &l
		case s.UDP != nil:
			u := *s.UDP
			if u.MaxDatagram == 0 {
				u.MaxDatagram = srcs.MaxUDPPayload
			}
			s.UDP = &u
		case s.TCPClient != nil:
			t := *s.TCPClient
			t.DialTimeout = orDuration(t.DialTimeout, srcs.DefaultDialTimeout)
			t.Backoff = t.Backoff.WithDefaults()
			s.TCPClient = &t
		case s.UnixClient != nil:
			u := *s.UnixClient
			u.DialTimeout = orDuration(u.DialTimeout, srcs.DefaultDialTimeout)
			u.Backoff = u.Backoff.WithDefaults()
			s.UnixClient = &u
		case s.Tail != nil:
			t := *s.Tail
			t.Poll = orDuration(t.Poll, srcs.DefaultTailPoll)
			t.CheckpointEvery = orDuration(t.CheckpointEvery, srcs.DefaultCheckpointEvery)
			s.Tail = &t
		case s.MQTT != nil:
			m := *s.MQTT
			if m.Version == 0 {
				m.Version = 4
			}
			m.KeepAlive = orDuration(m.KeepAlive, mqtt.DefaultMQTTKeepAlive)
			m.DialTimeout = orDuration(m.DialTimeout, srcs.DefaultDialTimeout)
			if m.MaxMessage == 0 {
				m.MaxMessage = mqtt.DefaultMQTTMaxMessage
			}
			m.Backoff = m.Backoff.WithDefaults()
			s.MQTT = &m
		}
	}
	if js := c.Output.JetStream; js != nil {
		j := *js
		if j.URL == "" {
			j.URL = nats.DefaultURL
		}
		if j.MaxPending == 0 {
			j.MaxPending = jetstream.DefaultMaxPending
		}
		j.AckTimeout = orDuration(j.AckTimeout, jetstream.DefaultAckTimeout)
		j.RetryWait = orDuration(j.RetryWait, jetstream.DefaultRetryWait)
		if j.Name == "" {
			j.Name = "sluice"
		}
		if j.MQTTSubject == "" && j.Subject != "" {
			j.MQTTSubject = j.Subject + "." + jetstream.TopicVar
		}
		if j.Records == "" {
			j.Records = jetstream.RecordsEach
		}
		if j.Stream != "" {
			if j.Storage == "" {
				j.Storage = "file"
			}
			if j.Replicas == 0 {
				j.Replicas = 1
			}
			j.DuplicateWindow = orDuration(j.DuplicateWindow, jetStreamDuplicateWindow)
		}
		c.Output.JetStream = &j
	}
	return c
}

// listenerDefaults fills a listener's handshake limits. They apply only
// to a tcp listener with tls or proxy_protocol, but print either way.
func listenerDefaults(l srcs.ListenerConfig) srcs.ListenerConfig {
	l.HandshakeTimeout = orDuration(l.HandshakeTimeout, srcs.DefaultHandshakeTimeout)
	if l.MaxHandshakes == 0 {
		l.MaxHandshakes = srcs.DefaultMaxHandshakes
	}
	return l
}

func orDuration(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}
