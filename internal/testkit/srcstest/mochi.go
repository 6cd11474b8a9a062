package srcstest

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// subscribedHook tells the test which clients subscribed.
type subscribedHook struct {
	mqtt.HookBase
	subscribed chan string
}

func (h *subscribedHook) ID() string           { return "test-subscribed" }
func (h *subscribedHook) Provides(b byte) bool { return b == mqtt.OnSubscribed }
func (h *subscribedHook) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	select {
	case h.subscribed <- cl.ID:
	default:
	}
}

// StartMochi runs an embedded mochi MQTT broker on a free loopback port,
// allowing every client, with an inline client for publishing, until the
// test ends. It returns the broker, its address, and the ids of clients
// as they subscribe.
func StartMochi(t testing.TB) (srv *mqtt.Server, addr string, subscribed <-chan string) {
	t.Helper()
	return startMochi(t, nil)
}

// StartMochiTLS is StartMochi with a TLS listener serving tc.
func StartMochiTLS(t testing.TB, tc *tls.Config) (srv *mqtt.Server, addr string, subscribed <-chan string) {
	t.Helper()
	return startMochi(t, tc)
}

func startMochi(t testing.TB, tc *tls.Config) (srv *mqtt.Server, addr string, subscribed <-chan string) {
	t.Helper()
	srv = mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	hook := &subscribedHook{subscribed: make(chan string, 16)}
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddHook(hook, nil); err != nil {
		t.Fatal(err)
	}
	l, err := listen(tc)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, l.Address(), hook.subscribed
}

// listener is the broker's TCP listener. mochi's own (listeners.TCP)
// closes its clients through Clients.GetByListener, which read-locks the
// client table twice; a client ending at that moment (its Delete waiting
// for the write lock between the two) deadlocks the broker's Close. This
// one closes the connections it accepted itself, then waits for the
// broker to finish with each, so Close never reads the client table.
type listener struct {
	ln net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

var _ listeners.Listener = (*listener)(nil)

func listen(tc *tls.Config) (*listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return &listener{ln: ln, conns: map[net.Conn]struct{}{}}, nil
}

func (l *listener) ID() string                { return "t" }
func (l *listener) Address() string           { return l.ln.Addr().String() }
func (l *listener) Protocol() string          { return "tcp" }
func (l *listener) Init(_ *slog.Logger) error { return nil }

// Serve hands each accepted connection to the broker until Close.
func (l *listener) Serve(establish listeners.EstablishFn) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			_ = establish(l.ID(), c)
			c.Close()
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}()
	}
}

// Close stops accepting, closes every connection still open and waits
// until the broker has let go of each.
func (l *listener) Close(listeners.CloseFn) {
	l.mu.Lock()
	l.closed = true
	l.ln.Close()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
