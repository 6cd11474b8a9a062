package srcs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// sockPath returns a fresh socket path in a short temporary directory:
// t.TempDir's names can pass the 107 bytes a socket address holds.
func sockPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// abstractName returns a name in Linux's abstract namespace unique to this
// test process.
func abstractName(t *testing.T) string {
	return fmt.Sprintf("@sluice-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
}

func listenUnix(t *testing.T, path string, cfg srcs.ListenerConfig) *srcs.Listener {
	t.Helper()
	l, err := srcs.ListenUnix(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dialUnix(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UnixConn)
}

func isSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// TestUnixListenerAcceptsAndReads accepts several connections on a socket
// file and on an abstract name, reads each through Read and the last one
// through Desc, and checks that Close removes the socket file.
func TestUnixListenerAcceptsAndReads(t *testing.T) {
	for _, kind := range []string{"file", "abstract"} {
		t.Run(kind, func(t *testing.T) {
			path := sockPath(t)
			if kind == "abstract" {
				if runtime.GOOS != "linux" {
					t.Skip("abstract socket names are Linux-only")
				}
				path = abstractName(t)
			}
			l := listenUnix(t, path, srcs.ListenerConfig{})
			if got := l.Addr().String(); got != path {
				t.Errorf("Addr = %q, want %q", got, path)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const n = 5
			for i := range n {
				cl := dialUnix(t, path)
				c, err := l.AcceptSource(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if want := "unix://" + path; c.Name() != want {
					t.Errorf("Name = %q, want %q", c.Name(), want)
				}
				if err := c.Open(ctx); err != nil {
					t.Fatal(err)
				}
				msg := []byte{'a' + byte(i), 'b', 'c'}
				if _, err := cl.Write(msg); err != nil {
					t.Fatal(err)
				}
				cl.Close()
				var got []byte
				if i == n-1 {
					got = srcstest.ReadDesc(t, c)
				} else if got, err = io.ReadAll(c); err != nil {
					t.Fatal(err)
				}
				if string(got) != string(msg) {
					t.Errorf("conn %d read %q, want %q", i, got, msg)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if kind == "file" {
				if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("socket file after Close: %v, want it removed", err)
				}
			}
			if _, err := net.Dial("unix", path); err == nil {
				t.Error("dial after Close succeeded")
			}
		})
	}
}

// TestUnixListenerCap checks MaxConns on a unix socket: connects past the
// cap wait in the backlog until a slot frees.
func TestUnixListenerCap(t *testing.T) {
	path := sockPath(t)
	l := listenUnix(t, path, srcs.ListenerConfig{MaxConns: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accept := func() srcs.Source {
		dialUnix(t, path)
		return waitAccept(t, acceptAsync(ctx, l), 5*time.Second)
	}
	c1 := accept()
	accept()

	third := dialUnix(t, path)
	pending := acceptAsync(ctx, l)
	select {
	case r := <-pending:
		t.Fatalf("Accept returned past MaxConns: %v, %v", r.c, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	c1.Close()
	c1.Close() // frees one slot, not two
	c3 := waitAccept(t, pending, 5*time.Second)
	if _, err := third.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(c3, buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read from the third connection = %q, %v", buf, err)
	}

	dialUnix(t, path)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if c, err := l.AcceptSource(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept with 2 open under MaxConns 2 = %v, %v; want a deadline error", c, err)
	}
}

// TestUnixListenerAcceptUnblocks checks that ctx and Close end an Accept
// blocked on a unix socket.
func TestUnixListenerAcceptUnblocks(t *testing.T) {
	for _, byClose := range []bool{false, true} {
		t.Run(fmt.Sprintf("close=%v", byClose), func(t *testing.T) {
			l := listenUnix(t, sockPath(t), srcs.ListenerConfig{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pending := acceptAsync(ctx, l)
			select {
			case r := <-pending:
				t.Fatalf("Accept returned early: %v, %v", r.c, r.err)
			case <-time.After(50 * time.Millisecond):
			}
			want := context.Canceled
			if byClose {
				want = net.ErrClosed
				l.Close()
			} else {
				cancel()
			}
			select {
			case r := <-pending:
				if !errors.Is(r.err, want) {
					t.Fatalf("Accept = %v, %v; want an error wrapping %v", r.c, r.err, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Accept still blocked")
			}
		})
	}
}

// staleSocket leaves a socket file at path whose listener is gone.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if !isSocket(path) {
		t.Fatal("no stale socket file left behind")
	}
}

func TestListenUnixExistingFile(t *testing.T) {
	t.Run("stale socket is replaced", func(t *testing.T) {
		path := sockPath(t)
		staleSocket(t, path)
		l := listenUnix(t, path, srcs.ListenerConfig{})
		cl := dialUnix(t, path)
		c := waitAccept(t, acceptAsync(context.Background(), l), 5*time.Second)
		cl.Write([]byte("ok"))
		cl.Close()
		if got, err := io.ReadAll(c); err != nil || string(got) != "ok" {
			t.Fatalf("read %q, %v", got, err)
		}
	})
	t.Run("live listener is kept", func(t *testing.T) {
		path := sockPath(t)
		l := listenUnix(t, path, srcs.ListenerConfig{})
		_, err := srcs.ListenUnix(path, srcs.ListenerConfig{})
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), path) {
			t.Fatalf("second ListenUnix = %v, want EADDRINUSE naming %s", err, path)
		}
		// The first listener still works.
		dialUnix(t, path)
		waitAccept(t, acceptAsync(context.Background(), l), 5*time.Second)
	})
	t.Run("regular file is kept", func(t *testing.T) {
		path := sockPath(t)
		if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := srcs.ListenUnix(path, srcs.ListenerConfig{}); !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("ListenUnix over a regular file = %v, want EADDRINUSE", err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != "data" {
			t.Fatalf("regular file after ListenUnix: %q, %v", got, err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		for _, path := range []string{"", "/" + strings.Repeat("x", 200)} {
			if _, err := srcs.ListenUnix(path, srcs.ListenerConfig{}); err == nil {
				t.Errorf("ListenUnix(%q) succeeded", path)
			}
		}
		if _, err := srcs.ListenUnix(sockPath(t), srcs.ListenerConfig{MaxConns: -1}); err == nil {
			t.Error("MaxConns -1 accepted")
		}
	})
}

func TestUnixClientConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  srcs.UnixClientConfig
		want string // substring of the error; "" for success
	}{
		{"ok", srcs.UnixClientConfig{Path: "/run/x.sock"}, ""},
		{"empty", srcs.UnixClientConfig{}, "Path is empty"},
		{"too long", srcs.UnixClientConfig{Path: "/" + strings.Repeat("x", 200)}, "Path"},
		{"negative timeout", srcs.UnixClientConfig{Path: "/x", DialTimeout: -1}, "DialTimeout"},
		{"negative backoff", srcs.UnixClientConfig{Path: "/x", Backoff: srcs.Backoff{Max: -1}}, "Backoff.Max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := srcs.NewUnixClient(tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Name() != "unix://"+tt.cfg.Path {
					t.Errorf("Name = %q", c.Name())
				}
				want := srcs.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second}
				if got := c.Reconnect(); got != want {
					t.Errorf("Reconnect = %+v, want %+v", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewUnixClient = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func newUnixClient(t *testing.T, path string) *srcs.UnixClient {
	t.Helper()
	c, err := srcs.NewUnixClient(srcs.UnixClientConfig{Path: path, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestUnixClientReconnect runs a client through a listener restart: a
// session, the server gone (Open refused), then a new listener at the same
// path and a second session read through Desc.
func TestUnixClientReconnect(t *testing.T) {
	path := sockPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newUnixClient(t, path)
	for i := range 2 {
		l := listenUnix(t, path, srcs.ListenerConfig{})
		if err := c.Open(ctx); err != nil {
			t.Fatalf("session %d: Open: %v", i, err)
		}
		sc, err := l.AcceptSource(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("session %d", i)
		// An accepted conn is a read-only source; write through its
		// descriptor.
		d, err := sc.(contract.Descriptor).Desc()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(d.FD, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		sc.Close()
		var got []byte
		if i == 0 {
			if got, err = io.ReadAll(c); err != nil {
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
		// The server restarts: while it is down, Open fails.
		l.Close()
		if err := c.Open(ctx); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("Open with the listener down = %v, want ENOENT", err)
		}
	}
}

// TestUnixClientRefused checks both ways a missing server shows: no socket
// file (ENOENT), and a stale file no one listens on (ECONNREFUSED). Either
// error names the path and is not a timeout.
func TestUnixClientRefused(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			path := sockPath(t)
			want := syscall.ENOENT
			if stale {
				staleSocket(t, path)
				want = syscall.ECONNREFUSED
			}
			c := newUnixClient(t, path)
			err := c.Open(context.Background())
			if !errors.Is(err, want) {
				t.Fatalf("Open = %v, want %v", err, want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the path", err)
			}
			if errors.Is(err, srcs.ErrTimeout) {
				t.Errorf("refusal classified as a timeout: %v", err)
			}
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Read without a session = %v, want net.ErrClosed", err)
			}
		})
	}
}

// TestUnixClientDeadline checks that SetReadDeadline and Close interrupt a
// blocked Read on a unix session.
func TestUnixClientDeadline(t *testing.T) {
	path := sockPath(t)
	l := listenUnix(t, path, srcs.ListenerConfig{})
	c := newUnixClient(t, path)
	if err := c.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc := waitAccept(t, acceptAsync(context.Background(), l), 5*time.Second)
	defer sc.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 8)); !errors.Is(driver.Classify(err), srcs.ErrTimeout) {
		t.Errorf("Read past the deadline = %v, want a timeout", err)
	}
}
