package srcs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Defaults of MQTTConfig, applied where a field is zero.
const (
	DefaultMQTTKeepAlive  = 30 * time.Second
	DefaultMQTTMaxMessage = 1 << 20
)

// mqttCloseTimeout bounds the goodbye Close writes (due acks, DISCONNECT)
// to a broker that may be gone.
const mqttCloseTimeout = 250 * time.Millisecond

// MQTTConfig configures NewMQTT.
type MQTTConfig struct {
	// Broker is the broker's "host:port". The host may be a name, resolved
	// at each dial.
	Broker string `yaml:"broker"`
	// ClientID identifies the session at the broker. It may be empty only
	// with CleanSession, and the broker then assigns one.
	ClientID string `yaml:"client_id"`
	// Topics are the topic filters to subscribe to; wildcards allowed.
	Topics []string `yaml:"topics"`
	// QoS is the maximum quality of service requested for every filter:
	// 0 (at most once) or 1 (at least once, acknowledged after release).
	QoS byte `yaml:"qos"`
	// Version is the protocol level: 4 for MQTT 3.1.1 (the default) or 5.
	Version byte `yaml:"version"`
	// CleanSession starts every connection with a fresh session (Clean
	// Start in MQTT 5). Without it the broker keeps the subscriptions and
	// the unacknowledged QoS 1 messages across connections.
	CleanSession bool `yaml:"clean_session"`
	// KeepAlive is the longest the client stays silent: a PINGREQ goes out
	// after KeepAlive without another packet, and a connection that brings
	// nothing for 1.5 × KeepAlive while the source waits for it is timed
	// out. The broker is told KeepAlive rounded up to whole seconds, and an
	// MQTT 5 broker's Server Keep Alive overrides it. Default 30s.
	KeepAlive time.Duration `yaml:"keep_alive"`
	// DialTimeout bounds the dial, name resolution included, and then the
	// CONNECT and SUBSCRIBE exchanges. Default DefaultDialTimeout.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// Backoff is what Reconnect reports to the engine; zero fields take
	// the defaults (Initial 50ms, Max 5s).
	Backoff Backoff `yaml:"backoff"`
	// Username and Password authenticate the connection when set. MQTT
	// 3.1.1 allows a password only with a username.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// MaxMessage bounds a message's payload. A larger PUBLISH ends the
	// session with an error wrapping ErrTooLarge. Default 1 MiB.
	MaxMessage int `yaml:"max_message"`
}

// MQTT is a source that subscribes to topic filters at an MQTT 3.1.1 or 5
// broker. Each Open dials, sends CONNECT, and (unless the broker resumed a
// session this client asked to keep) subscribes to every filter; Close ends
// the session with DISCONNECT, and Open may then connect again: it is a
// Reconnector. The engine reconnects with jittered backoff when the broker
// goes away, and the source subscribes again on every CONNACK that comes
// without a session.
//
// Read turns the PUBLISH packets it receives into a byte stream of frames
// (see FrameReader for the format and for reassembly across chunks). The
// source has no kernel descriptor: Read decodes the protocol, so runners
// drive it with Read on a goroutine, and SetReadDeadline lets them flush
// and stop it.
//
// QoS 1 messages are acknowledged after release, which makes delivery at
// least once: as the engine reports released stream offsets (Released),
// the source sends a PUBACK for each message whose frame lies entirely in
// released chunks, in the order the messages arrived, and never before.
// A message still unreleased when its connection ends cannot be
// acknowledged on the next one; it is forgotten, and a broker that kept
// the session (CleanSession false) sends it again, so the consumer may see
// it twice.
//
// An MQTT source is not safe for concurrent use, except that Close and
// SetReadDeadline may be called while Read blocks, and Released and Stats
// at any time.
type MQTT struct {
	cfg     MQTTConfig // defaults applied
	name    string
	backoff Backoff

	mu   sync.Mutex
	sess *mqttSession // the current session; nil between sessions

	// returned counts the stream bytes Read has returned over the
	// source's whole life, which is how the engine counts for Released.
	// Only Read touches it.
	returned int64

	ackMu   sync.Mutex
	ackSess *mqttSession // the session acks may go to; nil when closed
	recs    []mqttAck    // unacknowledged QoS 1 messages, oldest first
	recHead int          // recs[:recHead] are done

	sessions, subscribes, messages, acked, unacked, pings atomic.Uint64
}

// mqttAck is a QoS 1 message waiting for the release of its frame.
type mqttAck struct {
	end  int64 // stream offset just past the frame
	sess uint64
	id   uint16
}

// MQTTStats counts an MQTT source's events over its life.
type MQTTStats struct {
	// Sessions counts accepted CONNECTs; Subscribes counts those that
	// subscribed, i.e. every session the broker did not resume.
	Sessions, Subscribes uint64
	// Messages counts PUBLISH packets received.
	Messages uint64
	// Acked counts PUBACKs sent. Unacked counts QoS 1 messages forgotten
	// because their connection ended before their release.
	Acked, Unacked uint64
	// Pings counts PINGREQs sent.
	Pings uint64
}

// MQTTConnectError is a broker's refusal of a CONNECT.
type MQTTConnectError struct {
	Broker string
	// Code is the CONNACK's return code (3.1.1) or reason code (5).
	Code   byte
	Reason string
}

func (e *MQTTConnectError) Error() string {
	return fmt.Sprintf("srcs: mqtt mqtt://%s: connect refused: %s (0x%02x)", e.Broker, e.Reason, e.Code)
}

// MQTTSubscribeError is a broker's refusal of one topic filter.
type MQTTSubscribeError struct {
	Broker string
	Filter string
	Code   byte // the SUBACK's return or reason code
	Reason string
}

func (e *MQTTSubscribeError) Error() string {
	return fmt.Sprintf("srcs: mqtt mqtt://%s: subscribe %q refused: %s (0x%02x)", e.Broker, e.Filter, e.Reason, e.Code)
}

// NewMQTT checks cfg and returns a subscriber that has not connected yet.
func NewMQTT(cfg MQTTConfig) (*MQTT, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("srcs: mqtt: %w", err)
	}
	if cfg.Version == 0 {
		cfg.Version = 4
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultMQTTKeepAlive
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = DefaultMQTTMaxMessage
	}
	cfg.Topics = append([]string(nil), cfg.Topics...)
	return &MQTT{cfg: cfg, name: "mqtt://" + cfg.Broker, backoff: cfg.Backoff.WithDefaults()}, nil
}

func (cfg MQTTConfig) validate() error {
	host, port, err := net.SplitHostPort(cfg.Broker)
	if err != nil {
		return fmt.Errorf("Broker %q: %w", cfg.Broker, err)
	}
	if host == "" {
		return fmt.Errorf("Broker %q: missing host", cfg.Broker)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("Broker %q: port must be a number from 1 to 65535", cfg.Broker)
	}
	if cfg.ClientID == "" && !cfg.CleanSession {
		return errors.New("ClientID: empty, which brokers accept only with CleanSession")
	}
	if err := checkMQTTString(cfg.ClientID); err != nil {
		return fmt.Errorf("ClientID: %w", err)
	}
	if len(cfg.Topics) == 0 {
		return errors.New("Topics: no topic filter")
	}
	for i, f := range cfg.Topics {
		if err := checkTopicFilter(f); err != nil {
			return fmt.Errorf("Topics[%d] %q: %w", i, f, err)
		}
	}
	switch {
	case cfg.QoS > 1:
		return fmt.Errorf("QoS: %d, must be 0 or 1", cfg.QoS)
	case cfg.Version != 0 && cfg.Version != 4 && cfg.Version != 5:
		return fmt.Errorf("Version: %d, must be 4 (MQTT 3.1.1) or 5", cfg.Version)
	case cfg.KeepAlive < 0:
		return fmt.Errorf("KeepAlive: %v is negative", cfg.KeepAlive)
	case cfg.KeepAlive > math.MaxUint16*time.Second:
		return fmt.Errorf("KeepAlive: %v is above the protocol's 65535s", cfg.KeepAlive)
	case cfg.DialTimeout < 0:
		return fmt.Errorf("DialTimeout: %v is negative", cfg.DialTimeout)
	case cfg.MaxMessage < 0 || cfg.MaxMessage > mqttMaxRemaining:
		return fmt.Errorf("MaxMessage: %d, must be from 0 (default) to %d", cfg.MaxMessage, mqttMaxRemaining)
	case cfg.Version != 5 && cfg.Password != "" && cfg.Username == "":
		return errors.New("Password: MQTT 3.1.1 allows a password only with a Username")
	}
	if err := checkMQTTString(cfg.Username); err != nil {
		return fmt.Errorf("Username: %w", err)
	}
	if len(cfg.Password) > math.MaxUint16 {
		return errors.New("Password: longer than 65535 bytes")
	}
	return cfg.Backoff.validate("Backoff")
}

// checkMQTTString applies the protocol's rules for strings.
func checkMQTTString(s string) error {
	switch {
	case len(s) > math.MaxUint16:
		return fmt.Errorf("%d bytes, above 65535", len(s))
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("contains a NUL")
	}
	return nil
}

// checkTopicFilter applies the protocol's rules for topic filters, so a
// typo fails at New rather than as a SUBACK refusal at every reconnect.
func checkTopicFilter(f string) error {
	if f == "" {
		return errors.New("empty")
	}
	if err := checkMQTTString(f); err != nil {
		return err
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return errors.New("'#' must be the last level")
		case l != "#" && strings.Contains(l, "#"):
			return errors.New("'#' must occupy a whole level")
		case l != "+" && strings.Contains(l, "+"):
			return errors.New("'+' must occupy a whole level")
		}
	}
	return nil
}

// Name returns "mqtt://host:port" as configured.
func (m *MQTT) Name() string { return m.name }

// Reconnect returns the configured back-off with defaults filled in.
func (m *MQTT) Reconnect() Backoff { return m.backoff }

// Stats returns the source's counters.
func (m *MQTT) Stats() MQTTStats {
	return MQTTStats{
		Sessions: m.sessions.Load(), Subscribes: m.subscribes.Load(), Messages: m.messages.Load(),
		Acked: m.acked.Load(), Unacked: m.unacked.Load(), Pings: m.pings.Load(),
	}
}

// mqttSession is one connection. Read's state (the packet reader, the
// frame being returned) belongs to the goroutine calling Read; the writer
// goroutine sends keepalives and acks; writes are serialised by wmu.
type mqttSession struct {
	m    *MQTT
	conn net.Conn
	num  uint64        // numbers the source's sessions, for acks
	ka   time.Duration // keepalive in force; 0 disables it
	t0   time.Time     // clock base of the atomics below

	rd    *mqttReader
	early []packets.Packet // PUBLISHes that came before the SUBACK
	// The frame Read is returning: its prefix and topic, then its payload
	// (which aliases rd's buffer).
	frame    []byte
	frameOff int
	payload  []byte
	err      error // a fatal error held back until returned data is out

	wmu  sync.Mutex
	wbuf bytes.Buffer

	// Since t0, in nanoseconds. blockedSince is 0 unless a read of the
	// connection is in progress; it is offset by one so that 0 stays free.
	lastSent, lastRecv, blockedSince atomic.Int64
	failed                           atomic.Pointer[error] // why the session was cut from inside

	acks, spare []uint16 // PUBACKs due; guarded by m.ackMu
	ackReady    chan struct{}
	done        chan struct{}
	wg          sync.WaitGroup
}

// mqttConnReader is what the packet reader reads: the connection, with
// the times the keepalive needs.
type mqttConnReader struct{ s *mqttSession }

func (c mqttConnReader) Read(p []byte) (int, error) {
	s := c.s
	s.blockedSince.Store(s.now() + 1)
	n, err := s.conn.Read(p)
	s.blockedSince.Store(0)
	if n > 0 {
		s.lastRecv.Store(s.now())
	}
	return n, err
}

func (s *mqttSession) now() int64 { return int64(time.Since(s.t0)) }

// Open dials the broker and sets up a session within DialTimeout and ctx:
// CONNECT, CONNACK, and unless a session was resumed, SUBSCRIBE and SUBACK.
// A refusal is a *MQTTConnectError or a *MQTTSubscribeError; a timeout
// wraps ErrTimeout; dial errors (a *net.OpError, a *net.DNSError) stay
// reachable with errors.As. Open fails if a session is already open.
func (m *MQTT) Open(ctx context.Context) error {
	m.mu.Lock()
	open := m.sess != nil
	m.mu.Unlock()
	if open {
		return fmt.Errorf("srcs: mqtt %s: open: session already open", m.name)
	}
	d := net.Dialer{Timeout: m.cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", m.cfg.Broker)
	if err != nil {
		return fmt.Errorf("srcs: mqtt %s: dial: %w", m.name, Classify(err))
	}
	s := &mqttSession{
		m: m, conn: nc, num: m.sessions.Load() + 1, ka: m.cfg.KeepAlive, t0: time.Now(),
		ackReady: make(chan struct{}, 1), done: make(chan struct{}),
	}
	s.rd = newMQTTReader(mqttConnReader{s}, m.cfg.Version, m.cfg.MaxMessage)
	if err := m.handshake(ctx, s); err != nil {
		nc.Close()
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess != nil { // a concurrent Open won, which the contract forbids
		nc.Close()
		return fmt.Errorf("srcs: mqtt %s: open: session already open", m.name)
	}
	m.sess = s
	m.sessions.Add(1)
	m.ackMu.Lock()
	m.ackSess = s
	m.ackMu.Unlock()
	s.wg.Go(s.run)
	return nil
}

// handshake runs the CONNECT and SUBSCRIBE exchanges under one deadline,
// which ctx can cut short.
func (m *MQTT) handshake(ctx context.Context, s *mqttSession) error {
	deadline := time.Now().Add(m.cfg.DialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	s.conn.SetDeadline(deadline)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.conn.SetDeadline(time.Unix(1, 0)) // in the past: wakes any I/O
		close(fired)
	})
	err := m.connect(s, deadline)
	if !stop() {
		<-fired // the deadline it set must not outlive the handshake
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("srcs: mqtt %s: connect: %w", m.name, cerr)
		}
		return err
	}
	s.conn.SetDeadline(time.Time{})
	return nil
}

// connect sends CONNECT and SUBSCRIBE and checks the broker's answers.
func (m *MQTT) connect(s *mqttSession, deadline time.Time) error {
	cfg := &m.cfg
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: cfg.Version,
		Connect: packets.ConnectParams{
			ProtocolName:     []byte("MQTT"),
			Clean:            cfg.CleanSession,
			Keepalive:        uint16((cfg.KeepAlive + time.Second - 1) / time.Second),
			ClientIdentifier: cfg.ClientID,
		},
	}
	if cfg.Username != "" {
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(cfg.Username)
	}
	if cfg.Password != "" {
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(cfg.Password)
	}
	if cfg.Version == 5 && !cfg.CleanSession {
		// An MQTT 5 session ends with its connection unless given an
		// expiry; keep it as long as a 3.1.1 broker would.
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = math.MaxUint32, true
	}
	if err := s.write(deadline, pk.ConnectEncode); err != nil {
		return err
	}
	ack, err := s.handshakePacket("CONNACK")
	if err != nil {
		return err
	}
	if ack.FixedHeader.Type != packets.Connack {
		return fmt.Errorf("srcs: mqtt %s: connect: got %s before CONNACK: %w", m.name, packets.PacketNames[ack.FixedHeader.Type], ErrMalformed)
	}
	if ack.ReasonCode != 0 {
		return &MQTTConnectError{Broker: cfg.Broker, Code: ack.ReasonCode, Reason: mqttReason(cfg.Version, packets.Connack, ack.ReasonCode)}
	}
	if cfg.Version == 5 && ack.Properties.ServerKeepAliveFlag {
		s.ka = time.Duration(ack.Properties.ServerKeepAlive) * time.Second
	}
	if ack.SessionPresent && !cfg.CleanSession {
		return nil // the broker kept our subscriptions
	}

	const subID = 1 // the only packet id this client allocates
	sub := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, // [MQTT-3.8.1-1]
		ProtocolVersion: cfg.Version,
		PacketID:        subID,
	}
	for _, f := range cfg.Topics {
		sub.Filters = append(sub.Filters, packets.Subscription{Filter: f, Qos: cfg.QoS})
	}
	if err := s.write(deadline, sub.SubscribeEncode); err != nil {
		return err
	}
	for {
		pk, err := s.handshakePacket("SUBACK")
		if err != nil {
			return err
		}
		switch pk.FixedHeader.Type {
		case packets.Suback:
			if pk.PacketID != subID || len(pk.ReasonCodes) != len(cfg.Topics) {
				return fmt.Errorf("srcs: mqtt %s: subscribe: SUBACK for packet %d with %d codes, want packet %d with %d: %w",
					m.name, pk.PacketID, len(pk.ReasonCodes), subID, len(cfg.Topics), ErrMalformed)
			}
			for i, c := range pk.ReasonCodes {
				if c >= 0x80 {
					return &MQTTSubscribeError{Broker: cfg.Broker, Filter: cfg.Topics[i], Code: c, Reason: mqttReason(cfg.Version, packets.Suback, c)}
				}
			}
			m.subscribes.Add(1)
			return nil
		case packets.Publish:
			// The reader's buffer is reused by the next packet.
			pk.TopicName = strings.Clone(pk.TopicName)
			pk.Payload = bytes.Clone(pk.Payload)
			s.early = append(s.early, pk)
		case packets.Pingresp:
		default:
			return fmt.Errorf("srcs: mqtt %s: subscribe: unexpected %s packet: %w", m.name, packets.PacketNames[pk.FixedHeader.Type], ErrMalformed)
		}
	}
}

// handshakePacket reads one packet during Open.
func (s *mqttSession) handshakePacket(want string) (packets.Packet, error) {
	pk, _, err := s.rd.next(true)
	if err == nil {
		return pk, nil
	}
	m := s.m
	switch {
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrTooLarge):
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("broker closed the connection before %s: %w", want, io.ErrUnexpectedEOF)
	default:
		err = Classify(err)
	}
	return pk, fmt.Errorf("srcs: mqtt %s: waiting for %s: %w", m.name, want, err)
}

// session returns the current session, or an error wrapping net.ErrClosed.
func (m *MQTT) session(op string) (*mqttSession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sess == nil {
		return nil, fmt.Errorf("srcs: mqtt %s: %s: no session: %w", m.name, op, net.ErrClosed)
	}
	return m.sess, nil
}

// Read returns the next bytes of the frame stream (see FrameReader). It
// blocks only while it has returned nothing yet: once p holds a byte, it
// goes on only through packets already buffered. Control packets are
// consumed on the way. At the broker's end of the connection it returns
// io.EOF, and the engine reconnects. A malformed or unexpected packet ends
// the session with an error wrapping ErrMalformed, an oversized message
// with ErrTooLarge, and a silent broker with ErrTimeout.
func (m *MQTT) Read(p []byte) (int, error) {
	s, err := m.session("read")
	if err != nil {
		return 0, err
	}
	n := 0
	for n < len(p) {
		if s.frameOff < len(s.frame) {
			c := copy(p[n:], s.frame[s.frameOff:])
			s.frameOff += c
			n += c
			continue
		}
		if len(s.payload) > 0 {
			c := copy(p[n:], s.payload)
			s.payload = s.payload[c:]
			n += c
			continue
		}
		if s.err != nil {
			break
		}
		var pk packets.Packet
		if len(s.early) > 0 {
			pk = s.early[0]
			s.early[0] = packets.Packet{}
			s.early = s.early[1:]
		} else {
			var ok bool
			pk, ok, err = s.rd.next(n == 0)
			if err == nil && !ok {
				break
			}
		}
		if err == nil {
			err = m.dispatch(s, &pk, m.returned+int64(n))
		} else {
			err = m.readErr(s, err)
		}
		if err != nil {
			if n == 0 {
				// Not held back: a flush deadline is no failure, and the
				// next Read must try again.
				return 0, err
			}
			s.err = err
			break
		}
	}
	m.returned += int64(n)
	if n == 0 && s.err != nil {
		return 0, s.err
	}
	return n, nil
}

// dispatch acts on one packet received during a session. at is the stream
// offset where a PUBLISH's frame will start.
func (m *MQTT) dispatch(s *mqttSession, pk *packets.Packet, at int64) error {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		if pk.FixedHeader.Qos > 1 {
			return fmt.Errorf("srcs: mqtt %s: read: QoS 2 PUBLISH, above every subscription's QoS: %w", m.name, ErrMalformed)
		}
		m.messages.Add(1)
		s.frame = appendFrameHeader(s.frame[:0], pk.TopicName, len(pk.Payload))
		s.frameOff = 0
		s.payload = pk.Payload
		if pk.FixedHeader.Qos == 1 {
			end := at + int64(len(s.frame)+len(pk.Payload))
			m.ackMu.Lock()
			m.recs = append(m.recs, mqttAck{end: end, sess: s.num, id: pk.PacketID})
			m.ackMu.Unlock()
		}
	case packets.Pingresp, packets.Suback:
	case packets.Disconnect:
		if pk.ReasonCode == 0 {
			return io.EOF
		}
		return fmt.Errorf("srcs: mqtt %s: broker disconnected: %s (0x%02x)", m.name, mqttReason(m.cfg.Version, packets.Disconnect, pk.ReasonCode), pk.ReasonCode)
	default:
		return fmt.Errorf("srcs: mqtt %s: read: unexpected %s packet: %w", m.name, packets.PacketNames[pk.FixedHeader.Type], ErrMalformed)
	}
	return nil
}

// readErr maps an error from the packet reader to what Read returns.
func (m *MQTT) readErr(s *mqttSession, err error) error {
	if f := s.failed.Load(); f != nil {
		return *f // the writer cut the connection, and says why
	}
	switch {
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err // the runner's own deadline: passed through untouched
	}
	return fmt.Errorf("srcs: mqtt %s: read: %w", m.name, err)
}

// SetReadDeadline sets the deadline of the current session's reads.
func (m *MQTT) SetReadDeadline(t time.Time) error {
	s, err := m.session("set deadline")
	if err != nil {
		return err
	}
	return s.conn.SetReadDeadline(t)
}

// Released acknowledges, in arrival order, the QoS 1 messages of the
// current session whose frames end at or before through, and forgets
// those of earlier sessions. It only queues the PUBACKs: the session's
// writer goroutine sends them.
func (m *MQTT) Released(through int64) {
	m.ackMu.Lock()
	s := m.ackSess
	queued := false
	for m.recHead < len(m.recs) && m.recs[m.recHead].end <= through {
		r := m.recs[m.recHead]
		m.recHead++
		if s != nil && r.sess == s.num {
			s.acks = append(s.acks, r.id)
			queued = true
		} else {
			m.unacked.Add(1)
		}
	}
	switch {
	case m.recHead == len(m.recs):
		m.recs, m.recHead = m.recs[:0], 0
	case m.recHead >= 256 && m.recHead*2 >= len(m.recs):
		m.recs = m.recs[:copy(m.recs, m.recs[m.recHead:])]
		m.recHead = 0
	}
	m.ackMu.Unlock()
	if queued {
		select {
		case s.ackReady <- struct{}{}:
		default:
		}
	}
}

// Close ends the current session: it sends the PUBACKs already due and a
// DISCONNECT (briefly, if the broker is still there), closes the
// connection and waits for the session's goroutine. QoS 1 messages not
// yet released are forgotten. Close is idempotent, and Open may follow.
func (m *MQTT) Close() error {
	m.mu.Lock()
	s := m.sess
	m.sess = nil
	m.mu.Unlock()
	if s == nil {
		return nil
	}
	close(s.done)
	s.conn.SetWriteDeadline(time.Now()) // unblock a write to a stuck broker
	s.wg.Wait()
	m.ackMu.Lock()
	m.ackSess = nil
	m.unacked.Add(uint64(len(m.recs) - m.recHead))
	m.recs, m.recHead = m.recs[:0], 0
	m.ackMu.Unlock()
	if s.failed.Load() == nil {
		dl := time.Now().Add(mqttCloseTimeout)
		if s.sendAcks(dl) == nil {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: m.cfg.Version}
			_ = s.write(dl, pk.DisconnectEncode)
		}
	}
	if err := s.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("srcs: mqtt %s: close: %w", m.name, err)
	}
	return nil
}

// run is the session's writer: it sends acks as they become due, PINGREQ
// after KeepAlive of silence, and cuts a connection that stays silent for
// 1.5 × KeepAlive while Read waits on it. Only waiting counts: while the
// engine pauses reading, the broker's packets wait unread in the socket.
func (s *mqttSession) run() {
	var tick <-chan time.Time
	var t *time.Timer
	if s.ka > 0 {
		t = time.NewTimer(s.ka)
		defer t.Stop()
		tick = t.C
	}
	ka := int64(s.ka)
	for {
		select {
		case <-s.done:
			return
		case <-s.ackReady:
			if err := s.sendAcks(time.Now().Add(max(s.ka, time.Second))); err != nil {
				s.fail(err)
				return
			}
		case <-tick:
		}
		if ka == 0 {
			continue
		}
		now := s.now()
		if now-s.lastSent.Load() >= ka {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}
			if err := s.write(time.Now().Add(s.ka), pk.PingreqEncode); err != nil {
				s.fail(err)
				return
			}
			s.m.pings.Add(1)
		}
		next := s.lastSent.Load() + ka - now
		if b := s.blockedSince.Load(); b != 0 {
			since := max(b-1, s.lastRecv.Load())
			if now-since >= ka*3/2 {
				s.fail(fmt.Errorf("srcs: mqtt %s: keepalive: nothing from the broker for %v: %w",
					s.m.name, time.Duration(now-since).Round(time.Millisecond), ErrTimeout))
				return
			}
			next = min(next, since+ka*3/2-now)
		}
		t.Reset(max(time.Duration(next), time.Millisecond))
	}
}

// sendAcks writes the PUBACKs due, in one write.
func (s *mqttSession) sendAcks(deadline time.Time) error {
	m := s.m
	m.ackMu.Lock()
	ids := s.acks
	if len(ids) == 0 {
		m.ackMu.Unlock()
		return nil
	}
	// Double-buffered: Released appends to one slice while this writes
	// the other.
	s.acks = s.spare[:0]
	m.ackMu.Unlock()
	err := s.write(deadline, func(b *bytes.Buffer) error {
		for _, id := range ids {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id, ProtocolVersion: m.cfg.Version}
			if err := pk.PubackEncode(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		m.acked.Add(uint64(len(ids)))
	}
	m.ackMu.Lock()
	s.spare = ids[:0]
	m.ackMu.Unlock()
	return err
}

// write encodes one or more packets and sends them within deadline.
func (s *mqttSession) write(deadline time.Time, encode func(*bytes.Buffer) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wbuf.Reset()
	if err := encode(&s.wbuf); err != nil {
		return fmt.Errorf("srcs: mqtt %s: encode: %w", s.m.name, err)
	}
	s.conn.SetWriteDeadline(deadline)
	if _, err := s.conn.Write(s.wbuf.Bytes()); err != nil {
		return fmt.Errorf("srcs: mqtt %s: write: %w", s.m.name, Classify(err))
	}
	s.lastSent.Store(s.now())
	return nil
}

// fail cuts the session from the writer's side: Read's blocked read fails,
// and Read reports err instead of the closed connection.
func (s *mqttSession) fail(err error) {
	s.failed.CompareAndSwap(nil, &err)
	s.conn.Close()
}

// mqttReason names a CONNACK, SUBACK or DISCONNECT code.
func mqttReason(version, pkt, code byte) string {
	if version != 5 && pkt == packets.Connack {
		switch code {
		case 1:
			return "unacceptable protocol version"
		case 2:
			return "identifier rejected"
		case 3:
			return "server unavailable"
		case 4:
			return "bad user name or password"
		case 5:
			return "not authorized"
		}
		return "unknown return code"
	}
	switch code {
	case 0x80:
		if version != 5 {
			return "failure"
		}
		return "unspecified error"
	case 0x81:
		return "malformed packet"
	case 0x82:
		return "protocol error"
	case 0x83:
		return "implementation specific error"
	case 0x84:
		return "unsupported protocol version"
	case 0x85:
		return "client identifier not valid"
	case 0x86:
		return "bad user name or password"
	case 0x87:
		return "not authorized"
	case 0x88:
		return "server unavailable"
	case 0x89:
		return "server busy"
	case 0x8A:
		return "banned"
	case 0x8B:
		return "server shutting down"
	case 0x8C:
		return "bad authentication method"
	case 0x8D:
		return "keep alive timeout"
	case 0x8E:
		return "session taken over"
	case 0x8F:
		return "topic filter invalid"
	case 0x90:
		return "topic name invalid"
	case 0x91:
		return "packet identifier in use"
	case 0x93:
		return "receive maximum exceeded"
	case 0x94:
		return "topic alias invalid"
	case 0x95:
		return "packet too large"
	case 0x97:
		return "quota exceeded"
	case 0x98:
		return "administrative action"
	case 0x99:
		return "payload format invalid"
	case 0x9A:
		return "retain not supported"
	case 0x9B:
		return "qos not supported"
	case 0x9C:
		return "use another server"
	case 0x9D:
		return "server moved"
	case 0x9E:
		return "shared subscriptions not supported"
	case 0x9F:
		return "connection rate exceeded"
	case 0xA0:
		return "maximum connect time"
	case 0xA1:
		return "subscription identifiers not supported"
	case 0xA2:
		return "wildcard subscriptions not supported"
	}
	return "unknown reason code"
}

var (
	_ Source          = (*MQTT)(nil)
	_ Deadliner       = (*MQTT)(nil)
	_ Reconnector     = (*MQTT)(nil)
	_ ReleaseObserver = (*MQTT)(nil)
)
