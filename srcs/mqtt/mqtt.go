package mqtt

import (
	"crypto/tls"
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
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/wire/mqtt"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/trust"
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
	// 0 (at most once), 1 (at least once, PUBACK after release) or 2
	// (PUBREC after release: the broker sends a message again until it
	// has the PUBREC, and then never, so a message acknowledged is never
	// redelivered while the broker keeps its session; PUBCOMP answers its
	// PUBREL).
	QoS byte `yaml:"qos"`
	// Version is the protocol level: 4 for MQTT 3.1.1 (the default) or 5.
	Version byte `yaml:"version"`
	// CleanSession starts every connection with a fresh session (Clean
	// Start in MQTT 5). Without it the broker keeps the subscriptions and
	// the unacknowledged QoS 1 messages across connections.
	CleanSession bool `yaml:"clean_session"`
	// KeepAlive is the longest the client stays silent: a PINGREQ goes out
	// after KeepAlive without another packet, and a connection on which
	// the broker sends nothing for 1.5 × KeepAlive is cut. Bytes that
	// wait unread in the socket, while the engine pauses reading, count
	// as sent. The broker is told KeepAlive rounded up to whole seconds,
	// and an MQTT 5 broker's Server Keep Alive overrides it. Default 30s.
	KeepAlive time.Duration `yaml:"keep_alive"`
	// DialTimeout bounds the dial, name resolution included, and then the
	// CONNECT exchange and the SUBSCRIBE's write. Default
	// srcs.DefaultDialTimeout.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// Backoff is what Reconnect reports to the engine; zero fields take
	// the defaults (Initial 50ms, Max 5s).
	Backoff srcs.Backoff `yaml:"backoff"`
	// Username and Password authenticate the connection when set. MQTT
	// 3.1.1 allows a password only with a username. The password may come
	// from a file (PasswordFile) or an environment variable (PasswordEnv,
	// its name) instead; it prints redacted.
	Username     string      `yaml:"username"`
	Password     srcs.Secret `yaml:"password"`
	PasswordFile string      `yaml:"password_file"`
	PasswordEnv  string      `yaml:"password_env"`
	// TLS, when set, runs TLS to the broker (usually port 8883),
	// verifying it against CAFile (or the system's roots) and sending a
	// client certificate if CertFile is set. DialTimeout bounds the
	// handshake too. The source is then Encrypted: the engine reads it on
	// the goroutine runner, which decrypts into pool buffers.
	TLS *srcs.TLSConfig `yaml:"tls"`
	// MaxMessage bounds a message's payload. A larger PUBLISH ends the
	// session with an error wrapping srcs.ErrTooLarge. A message is never split
	// across chunks, so its whole packet must also fit in one pool buffer
	// (the engine's BufSize); one that does not ends the session the same
	// way. Default 1 MiB.
	MaxMessage int `yaml:"max_message"`
}

// MQTT is a source that subscribes to topic filters at an MQTT 3.1.1 or 5
// broker. Each Open dials, sends CONNECT, reads the CONNACK, and unless the
// broker resumed a session this client asked to keep, sends a SUBSCRIBE for
// every filter; Close ends the session with DISCONNECT, and Open may then
// connect again: it is a Reconnector. The engine reconnects with jittered
// backoff when the broker goes away, and the source subscribes again on
// every CONNACK that comes without a session.
//
// After Open, the session's socket is read like any other stream: runners
// that drive descriptors read it through Desc, the goroutine runner through
// Read, and the source's Framer cuts the stream into MQTT packets, so that
// every chunk holds whole packets exactly as the broker sent them (see
// ForEachMQTTMessage). Open does not wait for the SUBACK: it comes in the
// stream, and the framer checks it with every other packet. A refused
// filter ends the session with a *MQTTSubscribeError, a message above
// MaxMessage with an error wrapping srcs.ErrTooLarge, and a packet a broker must
// not send a subscriber with one wrapping srcs.ErrMalformed; the engine reports
// the error and reconnects.
//
// QoS 1 messages are acknowledged after release, which makes delivery at
// least once: Delivered learns where each message lies in the stream, and
// as the engine reports released stream offsets (Released), the source
// sends a PUBACK for each message whose chunk has been released, in the
// order the messages arrived, and never before. A message still unreleased
// when its connection ends cannot be acknowledged on the next one; it is
// forgotten, and a broker that kept the session (CleanSession false) sends
// it again, so the consumer may see it twice.
//
// Each session has a goroutine that writes the PUBACKs and the keepalive's
// PINGREQs. When the broker has sent nothing for 1.5 × KeepAlive it shuts
// the socket down, which a runner reads as the end of the stream, and Close
// returns the timeout (Read returns it at once).
//
// An MQTT source is not safe for concurrent use, except that Close and
// SetReadDeadline may be called while Read blocks, Delivered and Released
// as the engine calls them, and Stats at any time. Its Framer is safe for
// concurrent use.
type MQTT struct {
	cfg     MQTTConfig // defaults applied
	name    string
	tls     *tls.Config // nil without TLS
	backoff srcs.Backoff
	framer  *mqttFramer

	sess atomic.Pointer[mqttSession] // the current session; nil between sessions
	// subSent says whether the current session sent a SUBSCRIBE, which a
	// SUBACK in its stream must answer.
	subSent atomic.Bool

	ackMu     sync.Mutex
	ackSess   *mqttSession // the session acks may go to; nil when closed
	delivered int64        // the bytes passed to Delivered over the source's life
	recs      []mqttAck    // unacknowledged QoS 1 messages, oldest first
	recHead   int          // recs[:recHead] are done

	sessions, subscribes, messages, acked, unacked, pings atomic.Uint64
}

// mqttAck is a QoS 1 or 2 message waiting for the release of its packet.
type mqttAck struct {
	end  int64 // stream offset just past the packet
	sess uint64
	id   uint16
	typ  byte // the acknowledgement due: packets.Puback or packets.Pubrec
}

// mqttReply is an acknowledgement the session writes: a PUBACK, PUBREC
// or PUBCOMP for a packet id.
type mqttReply struct {
	typ byte
	id  uint16
}

// MQTTStats counts an MQTT source's events over its life.
type MQTTStats struct {
	// Sessions counts accepted CONNECTs; Subscribes counts the SUBACKs
	// that granted every filter, one for every session the broker did not
	// resume.
	Sessions, Subscribes uint64
	// Messages counts PUBLISH packets delivered.
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

// MQTTSubscribeError is a broker's refusal of one topic filter, or a
// SUBACK that does not answer the SUBSCRIBE (then Filter is empty and Err
// wraps srcs.ErrMalformed).
type MQTTSubscribeError struct {
	Broker string
	Filter string
	Code   byte // the SUBACK's return or reason code
	Reason string
	Err    error // why the SUBACK is malformed; nil for a refusal
}

func (e *MQTTSubscribeError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("srcs: mqtt mqtt://%s: subscribe: %s: %v", e.Broker, e.Reason, e.Err)
	}
	return fmt.Sprintf("srcs: mqtt mqtt://%s: subscribe %q refused: %s (0x%02x)", e.Broker, e.Filter, e.Reason, e.Code)
}

// Unwrap returns Err.
func (e *MQTTSubscribeError) Unwrap() error { return e.Err }

// NewMQTT checks cfg and returns a subscriber that has not connected yet.
func NewMQTT(cfg MQTTConfig) (*MQTT, error) {
	pw, err := srcs.LoadSecret("password", cfg.Password, cfg.PasswordFile, cfg.PasswordEnv)
	if err != nil {
		return nil, fmt.Errorf("srcs: mqtt: %w", err)
	}
	cfg.Password, cfg.PasswordFile, cfg.PasswordEnv = pw, "", ""
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("srcs: mqtt: %w", err)
	}
	var tc *tls.Config
	if cfg.TLS != nil {
		host, _, _ := net.SplitHostPort(cfg.Broker)
		if tc, err = trust.ClientConfig(cfg.TLS, host); err != nil {
			return nil, fmt.Errorf("srcs: mqtt %s: %w", cfg.Broker, err)
		}
	}
	if cfg.Version == 0 {
		cfg.Version = 4
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultMQTTKeepAlive
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = srcs.DefaultDialTimeout
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = DefaultMQTTMaxMessage
	}
	cfg.Topics = append([]string(nil), cfg.Topics...)
	m := &MQTT{cfg: cfg, name: "mqtt://" + cfg.Broker, backoff: cfg.Backoff.WithDefaults(), tls: tc}
	if tc != nil {
		m.name = "mqtts://" + cfg.Broker
	}
	m.framer = &mqttFramer{m: m, pk: srcs.MQTTPackets{
		// Room for a topic and properties besides the payload; checkPacket
		// holds the payload to MaxMessage exactly.
		Max:   min(cfg.MaxMessage+mqttOverhead, mqtt.MaxRemaining),
		Check: m.checkHeader,
	}}
	return m, nil
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
	case cfg.QoS > 2:
		return fmt.Errorf("QoS: %d, must be 0, 1 or 2", cfg.QoS)
	case cfg.Version != 0 && cfg.Version != 4 && cfg.Version != 5:
		return fmt.Errorf("Version: %d, must be 4 (MQTT 3.1.1) or 5", cfg.Version)
	case cfg.KeepAlive < 0:
		return fmt.Errorf("KeepAlive: %v is negative", cfg.KeepAlive)
	case cfg.KeepAlive > math.MaxUint16*time.Second:
		return fmt.Errorf("KeepAlive: %v is above the protocol's 65535s", cfg.KeepAlive)
	case cfg.DialTimeout < 0:
		return fmt.Errorf("DialTimeout: %v is negative", cfg.DialTimeout)
	case cfg.MaxMessage < 0 || cfg.MaxMessage > mqtt.MaxRemaining:
		return fmt.Errorf("MaxMessage: %d, must be from 0 (default) to %d", cfg.MaxMessage, mqtt.MaxRemaining)
	case cfg.Version != 5 && cfg.Password != "" && cfg.Username == "":
		return errors.New("Password: MQTT 3.1.1 allows a password only with a Username")
	}
	if err := checkMQTTString(cfg.Username); err != nil {
		return fmt.Errorf("Username: %w", err)
	}
	if len(cfg.Password) > math.MaxUint16 {
		return errors.New("Password: longer than 65535 bytes")
	}
	return cfg.Backoff.Validate("Backoff")
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
func (m *MQTT) Reconnect() srcs.Backoff { return m.backoff }

// Stats returns the source's counters.
func (m *MQTT) Stats() MQTTStats {
	return MQTTStats{
		Sessions: m.sessions.Load(), Subscribes: m.subscribes.Load(), Messages: m.messages.Load(),
		Acked: m.acked.Load(), Unacked: m.unacked.Load(), Pings: m.pings.Load(),
	}
}

// session returns the current session, or an error wrapping net.ErrClosed.
func (m *MQTT) session(op string) (*mqttSession, error) {
	if s := m.sess.Load(); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("srcs: mqtt %s: %s: no session: %w", m.name, op, net.ErrClosed)
}

// Desc returns the current session's socket, a connected TCP stream in
// non-blocking mode. The source keeps it open until Close.
func (m *MQTT) Desc() (contract.Desc, error) {
	if m.tls != nil {
		return contract.Desc{}, fmt.Errorf("srcs: mqtt %s: a TLS session: %w", m.name, srcs.ErrNoDescriptor)
	}
	s, err := m.session("desc")
	if err != nil {
		return contract.Desc{}, err
	}
	return contract.Desc{FD: s.fd, Kind: contract.Stream}, nil
}

// SyscallConn returns the current session's raw connection, so that the
// goroutine runner can wait for readability before it takes a buffer. Over
// TLS its Read waits for plaintext instead (see tlsread.Wait), and fails as
// Read would.
func (m *MQTT) SyscallConn() (syscall.RawConn, error) {
	s, err := m.session("syscall conn")
	if err != nil {
		return nil, err
	}
	if s.tr != nil {
		return mqttTLSWait{tlsWait{R: s.tr, Raw: s.sock, Name: m.name}, s}, nil
	}
	return s.rc, nil
}

// mqttTLSWait is tlsWait for an MQTT session: an error says why the
// session ended, as Read's do.
type mqttTLSWait struct {
	tlsWait
	s *mqttSession
}

func (w mqttTLSWait) Read(f func(fd uintptr) bool) error {
	if err := w.tlsWait.Read(f); err != nil {
		return w.s.readErr(err)
	}
	return nil
}

// Encrypted says the socket carries ciphertext, so the engine reads the
// source through Read (contract.Encrypted): true when the source runs TLS.
func (m *MQTT) Encrypted() bool { return m.tls != nil }

var _ contract.Encrypted = (*MQTT)(nil)

// Framer returns the framer the source's lanes must be framed with: MQTT
// packets, each checked as it completes (see the type's documentation).
// Its state is the source's, so it serves every session. The engine frames
// the source with it unless told otherwise; Delivered cuts a session whose
// chunks do not have the Records flag.
func (m *MQTT) Framer() srcs.Framer { return m.framer }

// Read reads the broker's raw bytes from the current session's connection,
// for the goroutine runner, which frames them like any runner. At the
// broker's end of the connection it returns io.EOF, and the engine
// reconnects; after the session cut the connection (a keepalive timeout, a
// failed write) it returns why instead.
func (m *MQTT) Read(p []byte) (int, error) {
	s, err := m.session("read")
	if err != nil {
		return 0, err
	}
	var n int
	if s.tr != nil {
		n, err = s.tr.Read(p)
	} else {
		n, err = s.conn.Read(p)
	}
	if n > 0 {
		s.lastRecv.Store(s.now())
	}
	if err != nil {
		err = s.readErr(err)
	}
	return n, err
}

// readErr maps an error from the connection to what Read returns.
func (s *mqttSession) readErr(err error) error {
	if f := s.failed.Load(); f != nil {
		return *f // the session cut the connection, and says why
	}
	switch {
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err // the runner's own deadline: passed through untouched
	}
	return fmt.Errorf("srcs: mqtt %s: read: %w", s.m.name, err)
}

// SetReadDeadline sets the deadline of the current session's reads.
func (m *MQTT) SetReadDeadline(t time.Time) error {
	s, err := m.session("set deadline")
	if err != nil {
		return err
	}
	return s.conn.SetReadDeadline(t)
}

// Skipped counts bytes the engine dropped from the stream. The source's
// framer never skips (an oversized message ends the session), but a framer
// given with engine.WithFraming might.
func (m *MQTT) Skipped(n int64) {
	m.ackMu.Lock()
	m.delivered += n
	m.ackMu.Unlock()
}

// Delivered notes where each QoS 1 message of a chunk ends in the stream,
// for Released, and counts the chunk's messages; it also tells the
// keepalive that the broker was heard. data must be a chunk the source's
// Framer framed (Records set); a Truncated tail is not a message.
func (m *MQTT) Delivered(data []byte, flags srcs.Flags) {
	var msgs, subs uint64
	rel := false
	m.ackMu.Lock()
	s := m.ackSess
	start := m.delivered
	m.delivered += int64(len(data))
	for off := 0; off < len(data) && flags&srcs.Records != 0; {
		hl, n, err := mqttCodec().PacketLen(data[off:])
		if err != nil || n == 0 {
			break // the Truncated tail
		}
		switch h := data[off]; h >> 4 {
		case packets.Publish:
			msgs++
			qos := (h >> 1) & 3
			if qos == 0 {
				break
			}
			typ := byte(packets.Puback)
			if qos == 2 {
				typ = packets.Pubrec
			}
			pub, err := mqttCodec().ParsePublish(h, data[off+hl:off+n], m.cfg.Version)
			switch {
			case err != nil: // the framer let no such packet through
			case s != nil:
				m.recs = append(m.recs, mqttAck{end: start + int64(off+n), sess: s.num, id: pub.ID, typ: typ})
			default: // delivered after Close: no connection left to ack on
				m.unacked.Add(1)
			}
		case packets.Pubrel:
			// The broker has the PUBREC, sent once the message was
			// released: complete it at once.
			if s != nil && n-hl >= 2 {
				id := uint16(data[off+hl])<<8 | uint16(data[off+hl+1])
				s.acks = append(s.acks, mqttReply{packets.Pubcomp, id})
				rel = true
			}
		case packets.Suback:
			subs++
		}
		off += n
	}
	m.ackMu.Unlock()
	m.messages.Add(msgs)
	m.subscribes.Add(subs)
	if s == nil {
		return
	}
	if rel {
		select {
		case s.ackReady <- struct{}{}:
		default:
		}
	}
	s.lastRecv.Store(s.now())
	if flags&srcs.Records == 0 {
		s.fail(fmt.Errorf("srcs: mqtt %s: a chunk without the Records flag: the source must be framed by its Framer: %w", m.name, srcs.ErrMalformed))
	}
}

// Released acknowledges, in arrival order, the QoS 1 and 2 messages of
// the current session whose packets end at or before through (PUBACK,
// PUBREC), and forgets
// those of earlier sessions. It only queues the PUBACKs: the session's
// goroutine sends them.
func (m *MQTT) Released(through int64) {
	m.ackMu.Lock()
	s := m.ackSess
	queued := false
	for m.recHead < len(m.recs) && m.recs[m.recHead].end <= through {
		r := m.recs[m.recHead]
		m.recHead++
		if s != nil && r.sess == s.num {
			s.acks = append(s.acks, mqttReply{r.typ, r.id})
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
// yet released are forgotten. If the session cut its connection (a
// keepalive timeout, a failed write, an unframed chunk), Close returns
// why. Close is idempotent, and Open may follow.
func (m *MQTT) Close() error {
	s := m.sess.Swap(nil)
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
	failed := s.failed.Load()
	if failed == nil {
		dl := time.Now().Add(mqttCloseTimeout)
		if s.sendAcks(dl) == nil {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: m.cfg.Version}
			_ = s.write(dl, pk.DisconnectEncode)
		}
	}
	// The socket itself: a TLS session's Close would first write a
	// close_notify, for up to 5 seconds, to a broker that may be stuck.
	err := s.sock.Close()
	switch {
	case failed != nil:
		return *failed
	case err != nil && !errors.Is(err, net.ErrClosed):
		return fmt.Errorf("srcs: mqtt %s: close: %w", m.name, err)
	}
	return nil
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
	_ srcs.Source          = (*MQTT)(nil)
	_ contract.Descriptor  = (*MQTT)(nil)
	_ srcs.Deadliner       = (*MQTT)(nil)
	_ srcs.Reconnector     = (*MQTT)(nil)
	_ srcs.Framed          = (*MQTT)(nil)
	_ srcs.ChunkObserver   = (*MQTT)(nil)
	_ srcs.ReleaseObserver = (*MQTT)(nil)
)
