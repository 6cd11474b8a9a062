// An MQTT subscriber's session: the connection, its handshake, and the
// writer that sends acknowledgements and keepalives.

package mqtt

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sluice-io/sluice/internal/wire/tlsread"
	"github.com/sluice-io/sluice/srcs"
	"golang.org/x/sys/unix"
)

// mqttSession is one connection. The runner reads its socket; the session
// goroutine writes keepalives and acks, and Close the goodbye; writes are
// serialised by wmu.
type mqttSession struct {
	m    *MQTT
	conn net.Conn   // kept open until Close: writes and Read go through it
	sock net.Conn   // the socket: conn, or the one under conn's TLS
	tr   *tlsReader // reads conn's TLS once the session is up; nil without TLS
	rc   syscall.RawConn
	fd   int           // conn's descriptor, for runners (Desc)
	num  uint64        // numbers the source's sessions, for acks
	ka   time.Duration // keepalive in force; 0 disables it
	t0   time.Time     // clock base of the atomics below

	wmu  sync.Mutex
	wbuf bytes.Buffer

	// Since t0, in nanoseconds.
	lastSent, lastRecv atomic.Int64
	failed             atomic.Pointer[error] // why the session was cut from inside

	acks, spare []mqttReply // acknowledgements due; guarded by m.ackMu
	ackReady    chan struct{}
	done        chan struct{}
	wg          sync.WaitGroup
}

func (s *mqttSession) now() int64 { return int64(time.Since(s.t0)) }

// Open dials the broker and sets up a session within DialTimeout and ctx:
// CONNECT, CONNACK, and unless a session was resumed, SUBSCRIBE, whose
// SUBACK the framer checks in the stream. A refused CONNECT is a
// *MQTTConnectError; a timeout wraps srcs.ErrTimeout; dial errors (a
// *net.OpError, a *net.DNSError) stay reachable with errors.As. Open fails
// if a session is already open.
func (m *MQTT) Open(ctx context.Context) error {
	if m.sess.Load() != nil {
		return fmt.Errorf("srcs: mqtt %s: open: session already open", m.name)
	}
	d := net.Dialer{Timeout: m.cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", m.cfg.Broker)
	if err != nil {
		return fmt.Errorf("srcs: mqtt %s: dial: %w", m.name, classify(err))
	}
	s := &mqttSession{
		m: m, conn: nc, sock: nc, num: m.sessions.Load() + 1, ka: m.cfg.KeepAlive, t0: time.Now(),
		ackReady: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if m.tls != nil {
		tc := tls.Client(nc, m.tls)
		s.conn, s.tr = tc, tlsread.NewReader(tc)
	}
	if err := s.raw(); err != nil {
		nc.Close()
		return err
	}
	subscribed, err := m.handshake(ctx, s)
	if err != nil {
		nc.Close()
		return err
	}
	if !m.sess.CompareAndSwap(nil, s) { // a concurrent Open won, which the contract forbids
		nc.Close()
		return fmt.Errorf("srcs: mqtt %s: open: session already open", m.name)
	}
	m.subSent.Store(subscribed)
	m.sessions.Add(1)
	m.ackMu.Lock()
	m.ackSess = s
	m.ackMu.Unlock()
	s.lastRecv.Store(s.now()) // the CONNACK
	s.wg.Go(s.run)
	return nil
}

// raw finds the connection's descriptor. The connection stays open and in
// Go's netpoller: the session writes through it, and the goroutine runner
// reads through it; runners that drive descriptors read the descriptor,
// which is in non-blocking mode.
func (s *mqttSession) raw() error {
	sc, ok := s.sock.(syscall.Conn)
	if !ok {
		return fmt.Errorf("srcs: mqtt %s: %w", s.m.name, srcs.ErrNoDescriptor)
	}
	rc, err := sc.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { s.fd = int(fd) })
	}
	if err != nil {
		return fmt.Errorf("srcs: mqtt %s: %w", s.m.name, err)
	}
	s.rc = rc
	return nil
}

// handshake runs the CONNECT exchange and sends the SUBSCRIBE under one
// deadline, which ctx can cut short. It reports whether it subscribed.
func (m *MQTT) handshake(ctx context.Context, s *mqttSession) (bool, error) {
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
	var subscribed bool
	var err error
	if tc, ok := s.conn.(*tls.Conn); ok {
		if err = tc.Handshake(); err != nil {
			err = fmt.Errorf("srcs: mqtt %s: tls handshake: %w", m.name, classify(err))
		}
	}
	if err == nil {
		subscribed, err = m.connect(s, deadline)
	}
	if !stop() {
		<-fired // the deadline it set must not outlive the handshake
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return false, fmt.Errorf("srcs: mqtt %s: connect: %w", m.name, cerr)
		}
		return false, err
	}
	s.conn.SetDeadline(time.Time{})
	return subscribed, nil
}

// connect sends CONNECT, checks the CONNACK, and sends SUBSCRIBE unless
// the broker kept the session's subscriptions.
func (m *MQTT) connect(s *mqttSession, deadline time.Time) (bool, error) {
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
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(cfg.Password.Reveal())
	}
	if cfg.Version == 5 && !cfg.CleanSession {
		// An MQTT 5 session ends with its connection unless given an
		// expiry; keep it as long as a 3.1.1 broker would.
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = math.MaxUint32, true
	}
	if err := s.write(deadline, pk.ConnectEncode); err != nil {
		return false, err
	}
	ack, err := s.readConnack()
	if err != nil {
		return false, err
	}
	if ack.ReasonCode != 0 {
		return false, &MQTTConnectError{Broker: cfg.Broker, Code: ack.ReasonCode, Reason: mqttReason(cfg.Version, packets.Connack, ack.ReasonCode)}
	}
	if cfg.Version == 5 && ack.Properties.ServerKeepAliveFlag {
		s.ka = time.Duration(ack.Properties.ServerKeepAlive) * time.Second
	}
	if ack.SessionPresent && !cfg.CleanSession {
		return false, nil // the broker kept our subscriptions
	}
	sub := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, // [MQTT-3.8.1-1]
		ProtocolVersion: cfg.Version,
		PacketID:        mqttSubID,
	}
	for _, f := range cfg.Topics {
		sub.Filters = append(sub.Filters, packets.Subscription{Filter: f, Qos: cfg.QoS})
	}
	if err := s.write(deadline, sub.SubscribeEncode); err != nil {
		return false, err
	}
	return true, nil
}

// readConnack reads the broker's first packet, which must be a CONNACK.
// It reads exactly that packet, the header a byte at a time: whatever
// follows it in the socket belongs to the runner.
func (s *mqttSession) readConnack() (packets.Packet, error) {
	m := s.m
	read := func(p []byte) error {
		_, err := io.ReadFull(s.conn, p)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			err = fmt.Errorf("broker closed the connection: %w", io.ErrUnexpectedEOF)
		default:
			err = classify(err)
		}
		return fmt.Errorf("srcs: mqtt %s: waiting for CONNACK: %w", m.name, err)
	}
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("srcs: mqtt %s: connect: %s: %w", m.name, fmt.Sprintf(format, args...), srcs.ErrMalformed)
	}
	var pk packets.Packet
	var hdr [5]byte
	if err := read(hdr[:1]); err != nil {
		return pk, err
	}
	if hdr[0] != packets.Connack<<4 {
		return pk, malformed("got %s (header 0x%02x) before CONNACK", packets.PacketNames[hdr[0]>>4], hdr[0])
	}
	rem := 0
	for i := 1; ; i++ {
		if i == len(hdr) {
			return pk, malformed("CONNACK remaining length longer than 4 bytes")
		}
		if err := read(hdr[i : i+1]); err != nil {
			return pk, err
		}
		rem |= int(hdr[i]&0x7f) << (7 * (i - 1))
		if hdr[i]&0x80 == 0 {
			break
		}
	}
	if rem < 2 || rem > mqttOverhead {
		return pk, malformed("CONNACK of %d bytes", rem)
	}
	body := make([]byte, rem)
	if err := read(body); err != nil {
		return pk, err
	}
	pk.FixedHeader = packets.FixedHeader{Type: packets.Connack, Remaining: rem}
	pk.ProtocolVersion = m.cfg.Version
	if err := pk.ConnackDecode(body); err != nil {
		return pk, malformed("CONNACK: %v", err)
	}
	return pk, nil
}

// run is the session's writer: it sends acks as they become due, PINGREQ
// after KeepAlive of silence, and cuts a connection on which the broker
// has sent nothing for 1.5 × KeepAlive. The engine may have paused reading
// meanwhile, or hold read bytes in a buffer: before it gives up, it asks
// the kernel whether the socket has received anything the chunks have not
// shown yet.
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
		since := s.lastRecv.Load()
		if now-since >= ka*3/2 {
			if quiet, ok := socketQuiet(s.rc); ok {
				since = max(since, now-int64(quiet))
			}
			if now-since >= ka*3/2 {
				s.fail(fmt.Errorf("srcs: mqtt %s: keepalive: nothing from the broker for %v: %w",
					s.m.name, time.Duration(now-since).Round(time.Millisecond), srcs.ErrTimeout))
				return
			}
		}
		next = min(next, since+ka*3/2-now)
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
		for _, a := range ids {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: a.typ}, PacketID: a.id, ProtocolVersion: m.cfg.Version}
			var err error
			switch a.typ {
			case packets.Pubrec:
				err = pk.PubrecEncode(b)
			case packets.Pubcomp:
				err = pk.PubcompEncode(b)
			default:
				err = pk.PubackEncode(b)
			}
			if err != nil {
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
		return fmt.Errorf("srcs: mqtt %s: write: %w", s.m.name, classify(err))
	}
	s.lastSent.Store(s.now())
	return nil
}

// fail cuts the session from inside and remembers why, for Read and
// Close. It shuts the socket down rather than closing it, since a runner
// may be reading the descriptor: the runner sees the end of the stream and
// finishes the lane, and the engine closes the source.
func (s *mqttSession) fail(err error) {
	if !s.failed.CompareAndSwap(nil, &err) {
		return
	}
	_ = s.rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
}
