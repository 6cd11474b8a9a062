package mqtt_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/srcs"
	mqttsrc "github.com/sluice-io/sluice/srcs/mqtt"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// --- an MQTT source driven as the engine and a runner drive it ---

type msg struct{ topic, payload string }

type chunk struct {
	data  []byte
	flags srcs.Flags
}

// driveOpts says how a subscriber drives its source.
type driveOpts struct {
	// viaDesc reads the session's descriptor, as the uring, epoll and
	// thread runners do; otherwise Read, as the goroutine runner does.
	viaDesc bool
	// bufSize is the size of the buffers the stream is framed into;
	// default 16 KiB.
	bufSize int
	// once ends after the first session (or failed Open) instead of
	// reconnecting.
	once bool
}

func (o driveOpts) String() string {
	if o.viaDesc {
		return "desc"
	}
	return "read"
}

// subscriber drives an MQTT source as the engine and a runner do: a
// goroutine opens it, reads its raw stream into fixed-size buffers,
// frames them with the source's Framer, emitting after every read, and
// calls Delivered with each chunk before the test can see it; when the
// session ends it closes the source, and opens it again after a short
// pause. The test takes chunks with pump, which decodes them with
// ForEachMQTTMessage and releases them in order through Released, or
// holds them.
type subscriber struct {
	t       *testing.T
	m       *mqttsrc.MQTT
	version byte
	opts    driveOpts

	chunks chan chunk
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	errs []error // what ended sessions (io.EOF aside), failed Opens, Close errors

	// The test goroutine's.
	msgs    []msg
	held    []chunk
	hold    bool
	through int64 // bytes released
}

func newMQTT(t *testing.T, cfg mqttsrc.MQTTConfig) *mqttsrc.MQTT {
	t.Helper()
	m, err := mqttsrc.NewMQTT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// subscribe starts driving a new source for cfg, until the test ends.
func subscribe(t *testing.T, cfg mqttsrc.MQTTConfig, opts driveOpts) *subscriber {
	t.Helper()
	if opts.bufSize == 0 {
		opts.bufSize = 16 << 10
	}
	version := cfg.Version
	if version == 0 {
		version = 4
	}
	s := &subscriber{t: t, m: newMQTT(t, cfg), version: version, opts: opts, chunks: make(chan chunk, 1<<12)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Go(s.run)
	t.Cleanup(s.stop)
	return s
}

// stop ends the driving goroutine, which closes the source. Cancelling
// first means that a session opened after the deadline below sees the
// cancellation before it reads.
func (s *subscriber) stop() {
	s.cancel()
	s.m.SetReadDeadline(time.Now())
	s.wg.Wait()
	for i := range s.held {
		s.release(s.held[i])
	}
	s.held = nil
}

func (s *subscriber) report(op string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Errorf("%s: %w", op, err))
}

func (s *subscriber) errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

func (s *subscriber) run() {
	for s.ctx.Err() == nil {
		if err := s.m.Open(s.ctx); err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.report("open", err)
		} else {
			err := s.session()
			if s.ctx.Err() == nil && !errors.Is(err, io.EOF) {
				s.report("read", err)
			}
			if err := s.m.Close(); err != nil {
				s.report("close", err)
			}
		}
		if s.opts.once {
			return
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// session reads one session to its end, as a runner reads a framed lane
// whose flush timeout is zero.
func (s *subscriber) session() error {
	if s.ctx.Err() != nil {
		return srcs.ErrStopped
	}
	f := s.m.Framer()
	read := s.m.Read
	if s.opts.viaDesc {
		d, err := s.m.Desc()
		if err != nil {
			return err
		}
		if d.Kind != contract.Stream {
			return fmt.Errorf("descriptor of kind %v", d.Kind)
		}
		read = func(p []byte) (int, error) { return s.readFD(d.FD, p) }
	}
	buf, n := make([]byte, s.opts.bufSize), 0
	for {
		k, err := read(buf[n:])
		n += k
		d, ferr := mqttsrc.SplitRecords(f, buf, n)
		if ferr == nil && d == 0 && n == len(buf) {
			ferr = &srcs.RecordError{Framer: f.String(), Size: int64(n), Max: n}
		}
		if d > 0 {
			data := buf[:d]
			next := make([]byte, s.opts.bufSize)
			n = copy(next, buf[d:n])
			buf = next
			s.emit(data, srcs.Records)
		}
		if ferr != nil {
			return ferr // the bad packet's bytes are dropped
		}
		if err != nil {
			if n > 0 {
				s.emit(buf[:n], mqttsrc.RecordFlags(0, n))
			}
			return err
		}
	}
}

// readFD reads the non-blocking descriptor, waiting for it with poll(2)
// in short steps so that stop can end the wait.
func (s *subscriber) readFD(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		switch {
		case err == nil && n == 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if s.ctx.Err() != nil {
				return 0, srcs.ErrStopped
			}
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 20)
		default:
			return 0, driver.Classify(os.NewSyscallError("read", err))
		}
	}
}

func (s *subscriber) emit(data []byte, flags srcs.Flags) {
	s.m.Delivered(data, flags)
	select {
	case s.chunks <- chunk{data, flags}:
	case <-s.ctx.Done():
	}
}

func (s *subscriber) release(c chunk) {
	s.through += int64(len(c.data))
	s.m.Released(s.through)
}

// pump takes chunks until done holds, failing the test after timeout.
func (s *subscriber) pump(timeout time.Duration, what string, done func() bool) {
	s.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !done() {
		select {
		case c := <-s.chunks:
			s.take(c)
		case <-time.After(20 * time.Millisecond):
		case <-deadline.C:
			s.t.Fatalf("timed out waiting for %s; %d messages, errors %v", what, len(s.msgs), s.errors())
		}
	}
}

// take decodes a chunk's messages into s.msgs, then releases or holds it.
func (s *subscriber) take(c chunk) {
	s.t.Helper()
	if c.flags&srcs.Records == 0 {
		s.t.Fatalf("a chunk without the Records flag: %v", c.flags)
	}
	err := mqttsrc.ForEachMQTTMessage(c.data, s.version, func(m mqttsrc.MQTTMessage) error {
		s.msgs = append(s.msgs, msg{string(m.Topic), string(m.Payload)})
		return nil
	})
	if err != nil && !(c.flags&srcs.Truncated != 0 && errors.Is(err, io.ErrUnexpectedEOF)) {
		s.t.Fatalf("chunk of %d bytes (%v): %v", len(c.data), c.flags, err)
	}
	if s.hold {
		s.held = append(s.held, c)
	} else {
		s.release(c)
	}
}

func (s *subscriber) waitMsgs(n int) {
	s.t.Helper()
	s.pump(10*time.Second, fmt.Sprintf("%d messages", n), func() bool { return len(s.msgs) >= n })
}

func (s *subscriber) waitErr(what string, match func(error) bool) error {
	s.t.Helper()
	var found error
	s.pump(10*time.Second, what, func() bool {
		for _, err := range s.errors() {
			if match(err) {
				found = err
				return true
			}
		}
		return false
	})
	return found
}

// eventually polls cond: for counters of an external broker, where there
// is nothing to wait on.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// payloadFor makes message i's payload: sizes vary from 0 to about 6 KiB,
// so packets straddle reads and fill buffers unevenly.
func payloadFor(i int) string {
	n := (i * 997) % 6000
	return fmt.Sprintf("%05d:", i) + strings.Repeat(string(rune('a'+i%26)), n)
}

// --- the embedded mochi broker ---

// startMochi runs a mochi broker until the test ends.
func startMochi(t *testing.T) (*mqtt.Server, string, <-chan string) { return srcstest.StartMochi(t) }

func waitSubscribed(t *testing.T, ch <-chan string, id string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case got := <-ch:
			if got == id {
				return
			}
		case <-timer.C:
			t.Fatalf("client %q never subscribed", id)
		}
	}
}

// --- a fake broker speaking through mochi's codec ---

type fakeBroker struct {
	t     *testing.T
	ln    net.Listener
	conns chan net.Conn
	wg    sync.WaitGroup
}

func newFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, conns: make(chan net.Conn, 16)}
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case b.conns <- c:
			default:
				c.Close()
			}
		}
	})
	t.Cleanup(func() {
		ln.Close()
		b.wg.Wait()
		for {
			select {
			case c := <-b.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return b
}

func (b *fakeBroker) addr() string { return b.ln.Addr().String() }

type fakeConn struct {
	t       *testing.T
	c       net.Conn
	br      *bufio.Reader
	version byte
}

func (b *fakeBroker) accept() *fakeConn {
	b.t.Helper()
	select {
	case c := <-b.conns:
		b.t.Cleanup(func() { c.Close() })
		return &fakeConn{t: b.t, c: c, br: bufio.NewReader(c), version: 4}
	case <-time.After(10 * time.Second):
		b.t.Fatal("no connection to the fake broker")
	}
	return nil
}

// readTimeout reads one packet from the client.
func (c *fakeConn) readTimeout(d time.Duration) (packets.Packet, error) {
	c.c.SetReadDeadline(time.Now().Add(d))
	var pk packets.Packet
	hb, err := c.br.ReadByte()
	if err != nil {
		return pk, err
	}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		return pk, err
	}
	n, _, err := packets.DecodeLength(c.br)
	if err != nil {
		return pk, err
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(c.br, body); err != nil {
		return pk, err
	}
	pk.ProtocolVersion = c.version
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectDecode(body)
		c.version = pk.ProtocolVersion
	case packets.Subscribe:
		err = pk.SubscribeDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	case packets.Pingreq:
	default:
		err = fmt.Errorf("fake broker: unexpected packet type %d", pk.FixedHeader.Type)
	}
	return pk, err
}

func (c *fakeConn) read(want byte) packets.Packet {
	c.t.Helper()
	pk, err := c.readTimeout(10 * time.Second)
	if err != nil {
		c.t.Fatalf("fake broker: reading %s: %v", packets.PacketNames[want], err)
	}
	if pk.FixedHeader.Type != want {
		c.t.Fatalf("fake broker: got %s, want %s", packets.PacketNames[pk.FixedHeader.Type], packets.PacketNames[want])
	}
	return pk
}

// encode encodes a packet in the connection's protocol version.
func (c *fakeConn) encode(pk packets.Packet) []byte {
	c.t.Helper()
	pk.ProtocolVersion = c.version
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackEncode(&b)
	case packets.Suback:
		err = pk.SubackEncode(&b)
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Pingresp:
		err = pk.PingrespEncode(&b)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&b)
	default:
		c.t.Fatalf("fake broker: cannot send packet type %d", pk.FixedHeader.Type)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return b.Bytes()
}

// send sends one packet and returns its length.
func (c *fakeConn) send(pk packets.Packet) int {
	c.t.Helper()
	b := c.encode(pk)
	c.sendRaw(b)
	return len(b)
}

func (c *fakeConn) sendRaw(p []byte) {
	c.t.Helper()
	c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.c.Write(p); err != nil {
		c.t.Fatalf("fake broker: write: %v", err)
	}
}

func connack(present bool, code byte) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, SessionPresent: present, ReasonCode: code}
}

func pub(qos byte, id uint16, topic, payload string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, PacketID: id, TopicName: topic, Payload: []byte(payload)}
}

var pingresp = packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}}

// grant answers a SUBSCRIBE with a SUBACK granting every filter, and
// returns the SUBACK's length.
func (c *fakeConn) grant(sub packets.Packet) int {
	c.t.Helper()
	codes := make([]byte, len(sub.Filters))
	for i, f := range sub.Filters {
		codes[i] = f.Qos
	}
	return c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: sub.PacketID, ReasonCodes: codes})
}

// handshake accepts the CONNECT, answers it, and if subscribe is set
// expects a SUBSCRIBE and grants it. It returns the CONNECT and the
// length of the SUBACK (0 without one): the first bytes of the stream the
// source's runner reads.
func (c *fakeConn) handshake(present, subscribe bool) (packets.Packet, int) {
	c.t.Helper()
	conn := c.read(packets.Connect)
	c.send(connack(present, 0))
	if !subscribe {
		return conn, 0
	}
	return conn, c.grant(c.read(packets.Subscribe))
}

// expectSilence checks the client sends nothing for d.
func (c *fakeConn) expectSilence(d time.Duration, what string) {
	c.t.Helper()
	pk, err := c.readTimeout(d)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.t.Fatalf("fake broker: got %s (%v) while expecting no %s", packets.PacketNames[pk.FixedHeader.Type], err, what)
	}
	c.br.Reset(c.c) // forget the failed read
}

// openAsync runs Open while the test plays the broker.
func openAsync(m *mqttsrc.MQTT) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- m.Open(context.Background()) }()
	return errc
}

func recvErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Open did not return")
	}
	return nil
}
