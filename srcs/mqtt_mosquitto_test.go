package srcs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/sluice-io/sluice/srcs"
)

// EnvRequireMosquitto set to "1" turns a missing mosquitto into a test
// failure instead of a skip; CI sets it.
const envRequireMosquitto = "SLUICE_REQUIRE_MOSQUITTO"

// mosquittoBin finds Debian's mosquitto, or skips (fails under
// SLUICE_REQUIRE_MOSQUITTO=1).
func mosquittoBin(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
		return "/usr/sbin/mosquitto"
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	if os.Getenv(envRequireMosquitto) == "1" {
		t.Fatalf("mosquitto is not installed (/usr/sbin/mosquitto or on PATH) and %s=1", envRequireMosquitto)
	}
	t.Skipf("mosquitto is not installed (apt-get install mosquitto, or `make test`); set %s=1 to fail instead", envRequireMosquitto)
	return ""
}

// mosquitto is an external broker process on a fixed loopback port, so it
// can be restarted where clients expect it.
type mosquitto struct {
	t    *testing.T
	bin  string
	conf string
	addr string

	mu  sync.Mutex
	cmd *exec.Cmd
	log *bytes.Buffer
}

func newMosquitto(t *testing.T) *mosquitto {
	bin := mosquittoBin(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	cfg := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\n", port)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &mosquitto{t: t, bin: bin, conf: conf, addr: addr}
	t.Cleanup(b.kill)
	b.start()
	return b
}

// start runs the broker and waits until it accepts connections.
func (b *mosquitto) start() {
	b.t.Helper()
	b.mu.Lock()
	b.log = &bytes.Buffer{}
	b.cmd = exec.Command(b.bin, "-c", b.conf)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	err := b.cmd.Start()
	b.mu.Unlock()
	if err != nil {
		b.t.Fatalf("start mosquitto: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.kill()
			b.t.Fatalf("mosquitto never listened on %s: %v; log:\n%s", b.addr, err, b.log)
		}
		time.Sleep(5 * time.Millisecond) // an external process: nothing to wait on
	}
}

// kill stops the broker abruptly, as a crash would.
func (b *mosquitto) kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	b.cmd.Process.Kill()
	b.cmd.Wait()
	b.cmd = nil
}

// publisher publishes "%08d" sequence numbers at QoS 1, one at a time,
// waiting for each PUBACK; on any failure it reconnects and publishes the
// same number again.
type publisher struct {
	addr, topic string
	sending     atomic.Int64 // the number being published now
	confirmed   atomic.Int64 // numbers below this have been acknowledged
	stop        chan struct{}
	wg          sync.WaitGroup
}

func startPublisher(t *testing.T, addr, topic string) *publisher {
	p := &publisher{addr: addr, topic: topic, stop: make(chan struct{})}
	p.wg.Go(p.run)
	t.Cleanup(p.halt)
	return p
}

func (p *publisher) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

func (p *publisher) run() {
	var conn net.Conn
	var br *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for seq := int64(0); ; {
		select {
		case <-p.stop:
			return
		default:
		}
		if conn == nil {
			c, err := p.connect()
			if err != nil {
				select {
				case <-p.stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			conn, br = c, bufio.NewReader(c)
		}
		p.sending.Store(seq)
		if err := p.publish(conn, br, seq); err != nil {
			conn.Close()
			conn = nil
			continue
		}
		seq++
		p.confirmed.Store(seq)
	}
}

func (p *publisher) connect() (net.Conn, error) {
	c, err := net.DialTimeout("tcp", p.addr, time.Second)
	if err != nil {
		return nil, err
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "sluice-test-pub"},
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

func (p *publisher) publish(c net.Conn, br *bufio.Reader, seq int64) error {
	id := uint16(seq%65535 + 1)
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 4,
		PacketID: id, TopicName: p.topic, Payload: fmt.Appendf(nil, "%08d", seq),
	}
	var b bytes.Buffer
	if err := pk.PublishEncode(&b); err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(b.Bytes()); err != nil {
		return err
	}
	for {
		ack, err := readBrokerPacket(br)
		if err != nil {
			return err
		}
		if ack.FixedHeader.Type == packets.Puback && ack.PacketID == id {
			return nil
		}
	}
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
	}
	return pk, err
}

// TestMQTTMosquittoRestart subscribes through the engine at QoS 1 to a
// real mosquitto, restarts the broker mid-stream while a publisher keeps
// publishing, and checks that every message published after the
// subscriber has subscribed again arrives. Duplicates are allowed (QoS 1
// is at least once) and counted.
func TestMQTTMosquittoRestart(t *testing.T) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			broker := newMosquitto(t)
			h := newHarness(t)
			const topic = "sluice/seq"
			sub := newMQTT(t, srcs.MQTTConfig{
				Broker: broker.addr, ClientID: fmt.Sprintf("sluice-test-sub-v%d", version), Topics: []string{topic},
				QoS: 1, Version: version, DialTimeout: 2 * time.Second,
				Backoff: srcs.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
			})
			h.add(sub)
			h.pump(10*time.Second, "the first SUBACK", func() bool { return sub.Stats().Subscribes >= 1 })

			pub := startPublisher(t, broker.addr, topic)
			h.pump(10*time.Second, "messages before the restart", func() bool { return len(h.msgs) >= 200 })

			broker.kill()
			broker.start()
			h.pump(10*time.Second, "the subscriber to subscribe again", func() bool { return sub.Stats().Subscribes >= 2 })
			// Every number first sent from now on reaches the new
			// subscription.
			from := pub.sending.Load() + 1
			h.pump(10*time.Second, "messages after the restart", func() bool { return pub.confirmed.Load() >= from+500 })
			pub.halt()
			last := pub.confirmed.Load() // numbers below it were acknowledged

			seen := map[int64]int{}
			missing := func() int64 {
				clear(seen)
				for _, m := range h.msgs {
					if m.topic != topic {
						t.Fatalf("message on topic %q", m.topic)
					}
					n, err := strconv.ParseInt(m.payload, 10, 64)
					if err != nil {
						t.Fatalf("payload %q", m.payload)
					}
					seen[n]++
				}
				var miss int64
				for n := from; n < last; n++ {
					if seen[n] == 0 {
						miss++
					}
				}
				return miss
			}
			h.pump(10*time.Second, "every message published after the resubscribe", func() bool { return missing() == 0 })
			dups := 0
			for _, c := range seen {
				dups += c - 1
			}
			st := sub.Stats()
			t.Logf("v%d: %d messages received, %d published after the resubscribe (from #%d to #%d), %d duplicates; stats %+v",
				version, len(h.msgs), last-from, from, last-1, dups, st)
			if st.Sessions < 2 {
				t.Fatalf("stats %+v: the subscriber never reconnected", st)
			}
		})
	}
}
