package engine_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// garbageBroker is a fake MQTT broker: it answers CONNECT with a CONNACK
// and SUBSCRIBE with a SUBACK granting QoS 0, then sends random bytes
// (seeded by the session's number; every other session's look like the
// start of a PUBLISH) and waits for the client to hang up.
type garbageBroker struct {
	ln       net.Listener
	sessions atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool
	errs     []error
}

func startGarbageBroker(t *testing.T) *garbageBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &garbageBroker{ln: ln, conns: map[net.Conn]bool{}}
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns[c] = true
			b.mu.Unlock()
			n := b.sessions.Add(1)
			b.wg.Go(func() {
				defer func() {
					b.mu.Lock()
					delete(b.conns, c)
					b.mu.Unlock()
					c.Close()
				}()
				if err := b.session(c, uint64(n)); err != nil {
					b.mu.Lock()
					b.errs = append(b.errs, fmt.Errorf("session %d: %w", n, err))
					b.mu.Unlock()
				}
			})
		}
	})
	return b
}

// readPacket reads one MQTT control packet: its first byte and body.
func readPacket(r io.Reader) (byte, []byte, error) {
	var h [1]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	rem, mul := 0, 1
	for i := 0; ; i++ {
		var b [1]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		rem += int(b[0]&0x7f) * mul
		mul <<= 7
		if b[0]&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, nil, errors.New("remaining length longer than 4 bytes")
		}
	}
	body := make([]byte, rem)
	_, err := io.ReadFull(r, body)
	return h[0], body, err
}

func (b *garbageBroker) session(c net.Conn, n uint64) error {
	h, _, err := readPacket(c)
	if err != nil || h>>4 != 1 {
		return fmt.Errorf("want CONNECT, got header 0x%02x: %v", h, err)
	}
	if _, err := c.Write([]byte{0x20, 2, 0, 0}); err != nil {
		return err
	}
	h, body, err := readPacket(c)
	if err != nil || h != 0x82 || len(body) < 2 {
		return fmt.Errorf("want SUBSCRIBE, got header 0x%02x: %v", h, err)
	}
	if _, err := c.Write([]byte{0x90, 3, body[0], body[1], 0}); err != nil {
		return err
	}
	garbage := make([]byte, 4096)
	rand.NewChaCha8([32]byte{byte(n), byte(n >> 8)}).Read(garbage)
	if n%2 == 0 {
		// Random bytes inside a PUBLISH (QoS 0 or 1) of a plausible
		// length, so that the packet's body is parsed too.
		garbage[0], garbage[1] = 0x30|byte(n)&2, byte(64+n)
	}
	c.Write(garbage) // the client may hang up as soon as it has seen enough
	io.Copy(io.Discard, c)
	return nil
}

func (b *garbageBroker) close(t *testing.T) {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
	for _, err := range b.errs {
		t.Error(err)
	}
}

// TestFaultMQTTGarbage has an MQTT source subscribe at a broker that,
// once the subscription is granted, sends random bytes. The source ends
// each session with an error wrapping srcs.ErrMalformed, which reaches the
// error handler, backs off and subscribes again; after shutdown nothing is
// left behind.
func TestFaultMQTTGarbage(t *testing.T) {
	const sessions = 6
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		ignore := goleak.IgnoreCurrent()
		fds0 := openFDs(t)
		b := startGarbageBroker(t)
		var mu sync.Mutex
		var errs []error
		tap := newLogTap()
		e, err := engine.New(engine.Config{Runner: runner, Workers: 1, Buffers: 32, BufSize: 4096, Flush: time.Millisecond},
			engine.WithLogger(slog.New(tap)),
			engine.WithErrorHandler(func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); pullAll(e, func(engine.Chunk) {}) }()
		src, err := mqtt.NewMQTT(mqtt.MQTTConfig{Broker: b.ln.Addr().String(), Topics: []string{"t/#"}, CleanSession: true,
			Backoff: srcs.Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.AddSource(src)
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, fmt.Sprintf("%d sessions", sessions), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(errs) >= sessions
		})
		if err := e.Shutdown(t.Context()); err != nil {
			t.Error(err)
		}
		<-done
		b.close(t)

		mu.Lock()
		defer mu.Unlock()
		for i, err := range errs {
			var se *srcs.SourceError
			if !errors.As(err, &se) || se.ID != id || !errors.Is(err, srcs.ErrMalformed) {
				t.Errorf("%s: error %d: %v; want one wrapping srcs.ErrMalformed, naming source %d", runner, i, err, id)
			}
		}
		backoffs := tap.matching(func(r logRec) bool { return r.msg == "source backing off" })
		if len(backoffs) < len(errs) {
			t.Errorf("%s: %d back-offs logged for %d failed sessions", runner, len(backoffs), len(errs))
		}
		if st := src.Stats(); st.Sessions < sessions || st.Subscribes < sessions {
			t.Errorf("%s: the source counts %d sessions, %d subscriptions; want %d", runner, st.Sessions, st.Subscribes, sessions)
		}
		goleak.VerifyNone(t, ignore)
		waitCount(t, runner+": descriptors open after shutdown", fds0, func() int { return openFDs(t) })
		var why []string
		for _, err := range errs {
			s := err.Error()
			why = append(why, s[strings.LastIndex(s, ": srcs: mqtt ")+1:])
		}
		t.Logf("%s: %d sessions, %d ended malformed and reported, %d back-offs:\n%s",
			runner, b.sessions.Load(), len(errs), len(backoffs), strings.Join(why, "\n"))
	})
}
