package srcs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

func TestTCPClientConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   srcs.TCPClientConfig
		field string // "" means valid
	}{
		{"valid", srcs.TCPClientConfig{Addr: "127.0.0.1:80"}, ""},
		{"valid name", srcs.TCPClientConfig{Addr: "localhost:9000"}, ""},
		{"valid v6", srcs.TCPClientConfig{Addr: "[::1]:9000"}, ""},
		{"empty", srcs.TCPClientConfig{}, "Addr"},
		{"no port", srcs.TCPClientConfig{Addr: "localhost"}, "Addr"},
		{"no host", srcs.TCPClientConfig{Addr: ":80"}, "Addr"},
		{"port zero", srcs.TCPClientConfig{Addr: "localhost:0"}, "Addr"},
		{"port too big", srcs.TCPClientConfig{Addr: "localhost:65536"}, "Addr"},
		{"port name", srcs.TCPClientConfig{Addr: "localhost:http"}, "Addr"},
		{"negative timeout", srcs.TCPClientConfig{Addr: "localhost:1", DialTimeout: -time.Second}, "DialTimeout"},
		{"negative backoff", srcs.TCPClientConfig{Addr: "localhost:1", Backoff: srcs.Backoff{Initial: -1}}, "Backoff.Initial"},
		{"negative max", srcs.TCPClientConfig{Addr: "localhost:1", Backoff: srcs.Backoff{Max: -1}}, "Backoff.Max"},
		{"negative attempts", srcs.TCPClientConfig{Addr: "localhost:1", Backoff: srcs.Backoff{Attempts: -1}}, "Backoff.Attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := srcs.NewTCPClient(tt.cfg)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("NewTCPClient(%+v) = %v", tt.cfg, err)
				}
				if want := "tcp://" + tt.cfg.Addr; c.Name() != want {
					t.Errorf("Name = %q, want %q", c.Name(), want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) || !strings.HasPrefix(err.Error(), "srcs: ") {
				t.Fatalf("NewTCPClient(%+v) = %v; want an srcs error naming %s", tt.cfg, err, tt.field)
			}
		})
	}
}

func newClient(t *testing.T, cfg srcs.TCPClientConfig) *srcs.TCPClient {
	t.Helper()
	c, err := srcs.NewTCPClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTCPClientReconnect(t *testing.T) {
	c := newClient(t, srcs.TCPClientConfig{Addr: "127.0.0.1:1"})
	want := srcs.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second}
	if got := c.Reconnect(); got != want {
		t.Errorf("Reconnect = %+v, want the defaults %+v", got, want)
	}
	c = newClient(t, srcs.TCPClientConfig{Addr: "127.0.0.1:1", Backoff: srcs.Backoff{Max: time.Second, Attempts: 3}})
	want = srcs.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Attempts: 3}
	if got := c.Reconnect(); got != want {
		t.Errorf("Reconnect = %+v, want %+v", got, want)
	}
}

// TestTCPClientSessions reads two sessions from one client: Read in the
// first, Desc in the second, with Close between them.
func TestTCPClientSessions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newClient(t, srcs.TCPClientConfig{Addr: ln.Addr().String()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read before Open = %v, want net.ErrClosed", err)
	}
	if _, err := c.Desc(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Desc before Open = %v, want net.ErrClosed", err)
	}
	for i := range 2 {
		if err := c.Open(ctx); err != nil {
			t.Fatalf("session %d: Open: %v", i, err)
		}
		if err := c.Open(ctx); err == nil {
			t.Fatalf("session %d: second Open succeeded", i)
		}
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("session %d", i)
		sc.Write([]byte(msg))
		sc.Close()
		var got []byte
		if i == 0 {
			got, err = io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
		} else {
			got = srcstest.ReadDesc(t, c)
		}
		if string(got) != msg {
			t.Errorf("session %d read %q, want %q", i, got, msg)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

// TestTCPClientDeadline checks that SetReadDeadline interrupts a blocked
// Read, and that Close does too.
func TestTCPClientDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newClient(t, srcs.TCPClientConfig{Addr: ln.Addr().String()})
	if err := c.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 8)); !errors.Is(driver.Classify(err), srcs.ErrTimeout) {
		t.Errorf("Read past the deadline = %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Read block; it fails either way
	c.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Read after Close succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
}

func TestTCPClientRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, srcs.TCPClientConfig{Addr: addr})
	err = c.Open(context.Background())
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Open = %v, want ECONNREFUSED", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Errorf("Open = %v, want a dial *net.OpError inside", err)
	}
	if op != nil && (op.Addr == nil || op.Addr.String() != addr) {
		t.Errorf("the *net.OpError inside names %v, want %s", op.Addr, addr)
	}
	if errors.Is(err, srcs.ErrTimeout) {
		t.Errorf("refusal classified as a timeout: %v", err)
	}
}

// TestTCPClientErrorNamesTheAddressOnce: an open error, as the engine
// reports it (a *srcs.SourceError naming the source), names the address
// once.
func TestTCPClientErrorNamesTheAddressOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name string
		cfg  srcs.TCPClientConfig
	}{
		{"refused", srcs.TCPClientConfig{Addr: addr}},
		{"refused, TLS", srcs.TCPClientConfig{Addr: addr, TLS: &srcs.TLSConfig{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.cfg)
			err := c.Open(context.Background())
			if err == nil {
				t.Fatal("Open of a closed port succeeded")
			}
			msg := (&srcs.SourceError{ID: 3, Name: c.Name(), Op: "open", Err: err}).Error()
			if n := strings.Count(msg, addr); n != 1 {
				t.Fatalf("%q names the address %d times, want once", msg, n)
			}
			if !strings.HasSuffix(msg, "connection refused") {
				t.Fatalf("%q does not end with the cause", msg)
			}
		})
	}
}

func TestTCPClientDNSFailure(t *testing.T) {
	c := newClient(t, srcs.TCPClientConfig{Addr: "nonexistent.invalid:1", DialTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Open(ctx)
	var dns *net.DNSError
	if !errors.As(err, &dns) {
		t.Fatalf("Open = %v, want a *net.DNSError inside", err)
	}
	if !strings.Contains(err.Error(), "nonexistent.invalid") {
		t.Errorf("error %q does not name the host", err)
	}
}

// fullBacklog returns the address of a listener that never accepts and
// whose accept queue is full, so the kernel drops further SYNs and a dial
// to it can only time out. It skips if the queue cannot be filled.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.CloseOnExec(fd)
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	for i := range 16 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Logf("backlog full after %d connections", i)
				return addr
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("could not fill a listen backlog of 0")
	return ""
}

func TestTCPClientTimeout(t *testing.T) {
	addr := fullBacklog(t)
	c := newClient(t, srcs.TCPClientConfig{Addr: addr, DialTimeout: 100 * time.Millisecond})
	start := time.Now()
	err := c.Open(context.Background())
	if !errors.Is(err, srcs.ErrTimeout) {
		t.Fatalf("Open = %v, want srcs.ErrTimeout", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Errorf("Open = %v, want a *net.OpError inside", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Open took %v with a 100ms DialTimeout", el)
	}

	// ctx's deadline is a dial timeout too; its cancellation is not.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c = newClient(t, srcs.TCPClientConfig{Addr: addr})
	if err := c.Open(ctx); !errors.Is(err, srcs.ErrTimeout) {
		t.Errorf("Open past ctx deadline = %v, want srcs.ErrTimeout", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := c.Open(ctx); err == nil || errors.Is(err, srcs.ErrTimeout) {
		t.Errorf("Open with a cancelled ctx = %v, want a non-timeout error", err)
	}
}
