package mosquitto

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Publisher publishes "%08d" sequence numbers over MQTT 3.1.1 at QoS 1
// or 2 on its topic, one at a time, waiting for each PUBACK (at QoS 2,
// for the PUBREC, then for the PUBCOMP that answers its PUBREL), and at
// most one per interval when paced; on any failure it reconnects with a
// clean session and publishes the same number again, so the broker may
// see a number twice. A client
// identifier of its own lets several publish to one broker at once. Its
// methods are safe for concurrent use; Halt it before the program ends.
type Publisher struct {
	addr, clientID, topic string
	every                 time.Duration
	qos                   byte

	sending   atomic.Int64
	confirmed atomic.Int64
	sessions  atomic.Int64
	paused    chan chan struct{} // Pause hands run a channel Resume closes
	stop      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup
}

// StartPacedPublisher starts publishing at QoS 1 to the broker at addr
// on topic as clientID, one number per interval at most (0: as fast as the
// broker acknowledges).
func StartPacedPublisher(addr, clientID, topic string, every time.Duration) *Publisher {
	return StartQoSPublisher(addr, clientID, topic, every, 1)
}

// StartQoSPublisher is StartPacedPublisher at QoS qos, which must be 1
// or 2.
func StartQoSPublisher(addr, clientID, topic string, every time.Duration, qos byte) *Publisher {
	if qos != 1 && qos != 2 {
		panic(fmt.Sprintf("mosquitto: a publisher's QoS is 1 or 2, not %d", qos))
	}
	p := &Publisher{addr: addr, clientID: clientID, topic: topic, every: every, qos: qos, stop: make(chan struct{}),
		paused: make(chan chan struct{})}
	p.wg.Go(p.run)
	return p
}

// Topic returns the topic the publisher publishes on.
func (p *Publisher) Topic() string { return p.topic }

// Sending returns the number being published now.
func (p *Publisher) Sending() int64 { return p.sending.Load() }

// Confirmed returns the count of numbers the broker has acknowledged: every
// number below it.
func (p *Publisher) Confirmed() int64 { return p.confirmed.Load() }

// Sessions returns how many connections the broker accepted.
func (p *Publisher) Sessions() int64 { return p.sessions.Load() }

// Pause returns once the publisher is between two numbers, the last one
// it sent confirmed, and keeps it there until the returned function is
// called. The schedule of a paced publisher moves on by the pause.
func (p *Publisher) Pause() (resume func()) {
	r := make(chan struct{})
	select {
	case p.paused <- r:
	case <-p.stop:
	}
	return sync.OnceFunc(func() { close(r) })
}

// Halt stops publishing and waits for the publisher's goroutine. It is
// idempotent.
func (p *Publisher) Halt() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// wait sleeps for d, or until Halt; it reports whether to go on.
func (p *Publisher) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.stop:
		return false
	case <-t.C:
		return true
	}
}

func (p *Publisher) run() {
	var conn net.Conn
	var br *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	start := time.Now()
	for seq := int64(0); ; {
		select {
		case <-p.stop:
			return
		case r := <-p.paused:
			t0 := time.Now()
			select {
			case <-r:
			case <-p.stop:
				return
			}
			start = start.Add(time.Since(t0))
		default:
		}
		if conn == nil {
			c, err := connectAs(p.addr, p.clientID)
			if err != nil {
				if !p.wait(10 * time.Millisecond) {
					return
				}
				continue
			}
			p.sessions.Add(1)
			conn, br = c, bufio.NewReader(c)
		}
		if p.every > 0 {
			if d := time.Until(start.Add(time.Duration(seq) * p.every)); d > 0 && !p.wait(d) {
				return
			}
		}
		p.sending.Store(seq)
		if err := publishSeq(conn, br, p.topic, p.qos, seq); err != nil {
			conn.Close()
			conn = nil
			continue
		}
		seq++
		p.confirmed.Store(seq)
	}
}

// connectAs opens an MQTT 3.1.1 session with a clean start as clientID.
func connectAs(addr, clientID string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: clientID},
	}
	var b bytes.Buffer
	pk.ConnectEncode(&b)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(b.Bytes()); err != nil {
		c.Close()
		return nil, err
	}
	ack, err := readBrokerPacket(bufio.NewReader(c))
	if err == nil && (ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0) {
		err = fmt.Errorf("connack %+v", ack)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// publishSeq publishes seq at qos and waits for its PUBACK, or at QoS 2
// for its PUBREC, answers that with PUBREL and waits for the PUBCOMP.
func publishSeq(c net.Conn, br *bufio.Reader, topic string, qos byte, seq int64) error {
	id := uint16(seq%65535 + 1)
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, ProtocolVersion: 4,
		PacketID: id, TopicName: topic, Payload: fmt.Appendf(nil, "%08d", seq),
	}
	var b bytes.Buffer
	if err := pk.PublishEncode(&b); err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(b.Bytes()); err != nil {
		return err
	}
	want := byte(packets.Puback)
	if qos == 2 {
		if err := awaitAck(br, packets.Pubrec, id); err != nil {
			return err
		}
		rel := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, ProtocolVersion: 4, PacketID: id}
		b.Reset()
		if err := rel.PubrelEncode(&b); err != nil {
			return err
		}
		if _, err := c.Write(b.Bytes()); err != nil {
			return err
		}
		want = packets.Pubcomp
	}
	return awaitAck(br, want, id)
}

// awaitAck reads the broker's packets until the acknowledgement typ of
// packet id.
func awaitAck(br *bufio.Reader, typ byte, id uint16) error {
	for {
		ack, err := readBrokerPacket(br)
		if err != nil {
			return err
		}
		if ack.FixedHeader.Type == typ && ack.PacketID == id {
			return nil
		}
	}
}

// StartPublisher starts publishing "%08d" sequence numbers to the broker
// at addr on topic as fast as it acknowledges them (see Publisher).
func StartPublisher(addr, topic string) *Publisher {
	return StartPacedPublisher(addr, "sluice-test-pub", topic, 0)
}

// readBrokerPacket reads one MQTT 3.1.1 packet a broker sends a publisher.
func readBrokerPacket(br *bufio.Reader) (packets.Packet, error) {
	var pk packets.Packet
	hb, err := br.ReadByte()
	if err != nil {
		return pk, err
	}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		return pk, err
	}
	n, _, err := packets.DecodeLength(br)
	if err != nil {
		return pk, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return pk, err
	}
	pk.ProtocolVersion = 4
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	}
	return pk, err
}
