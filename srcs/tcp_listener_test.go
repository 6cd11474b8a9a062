package srcs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// logRecords is a slog.Handler that hands every record to a channel, so a
// test can wait for what the code under test logs.
type logRecords chan slog.Record

func (h logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecords) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r:
	default: // a test that stopped listening must not block the code
	}
	return nil
}
func (h logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logRecords) WithGroup(string) slog.Handler      { return h }

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// accepted is what a listener's connections offer besides Source: the
// capabilities runners and the engine ask of them.
type accepted interface {
	srcs.Source
	srcs.Identified
	contract.Encrypted
	contract.Descriptor
	SyscallConn() (syscall.RawConn, error)
}

type acceptResult struct {
	c   srcs.Source
	err error
}

// acceptAsync runs Accept in a goroutine. The test must receive the result.
func acceptAsync(ctx context.Context, l *srcs.Listener) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		c, err := l.AcceptSource(ctx)
		ch <- acceptResult{c, err}
	}()
	return ch
}

func waitAccept(t *testing.T, ch <-chan acceptResult, within time.Duration) accepted {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c.(accepted)
	case <-time.After(within):
		t.Fatalf("Accept did not return within %v", within)
	}
	return nil
}

func listen(t *testing.T, addr string, cfg srcs.ListenerConfig) *srcs.Listener {
	t.Helper()
	l, err := srcs.ListenTCP(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, addr net.Addr) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func hasIPv6Loopback() bool {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// TestListenerAcceptsAndReads accepts several connections on IPv4 and IPv6
// and reads each one's bytes through Read, and one through Desc.
func TestListenerAcceptsAndReads(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			if addr[0] == '[' && !hasIPv6Loopback() {
				t.Skip("no ::1 on this host")
			}
			l := listen(t, addr, srcs.ListenerConfig{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const n = 5
			for i := range n {
				cl := dial(t, l.Addr())
				c, err := l.AcceptSource(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if want := "tcp://" + cl.LocalAddr().String(); c.Name() != want {
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
				} else {
					got, err = io.ReadAll(c)
					if err != nil {
						t.Fatal(err)
					}
				}
				if string(got) != string(msg) {
					t.Errorf("conn %d read %q, want %q", i, got, msg)
				}
			}
		})
	}
}

// TestListenerCap checks that at MaxConns the listener stops accepting
// until one of its connections closes, and that closing a connection twice
// frees one slot, not two.
func TestListenerCap(t *testing.T) {
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{MaxConns: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c1 := waitAcceptDialed(t, ctx, l)
	waitAcceptDialed(t, ctx, l)

	// The third client completes its handshake into the backlog, so its
	// dial succeeds, but Accept must not hand it out.
	third := dial(t, l.Addr())
	pending := acceptAsync(ctx, l)
	select {
	case r := <-pending:
		t.Fatalf("Accept returned past MaxConns: %v, %v", r.c, r.err)
	case <-time.After(200 * time.Millisecond):
	}

	// Closing twice must free one slot only.
	closed := make(chan error, 1)
	go func() {
		err := c1.Close()
		c1.Close()
		closed <- err
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing an accepted connection twice hangs")
	}
	c3 := waitAccept(t, pending, 5*time.Second)
	if got, want := c3.Name(), "tcp://"+third.LocalAddr().String(); got != want {
		t.Errorf("accepted %s, want the third client %s", got, want)
	}

	dial(t, l.Addr())
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if c, err := l.AcceptSource(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fourth Accept with 2 open = %v, %v; want a deadline error (double Close freed two slots?)", c, err)
	}
}

// TestListenerAcceptUnblocks checks that Close and ctx both end a pending
// Accept, waiting for a connection or for a slot, and that a cancelled
// Accept leaves the listener usable.
func TestListenerAcceptUnblocks(t *testing.T) {
	tests := []struct {
		name     string
		maxConns int
		byClose  bool
	}{
		{"ctx, waiting for a connection", 0, false},
		{"close, waiting for a connection", 0, true},
		{"ctx, waiting for a slot", 1, false},
		{"close, waiting for a slot", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{MaxConns: tt.maxConns})
			bg, cancelBg := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelBg()
			if tt.maxConns > 0 {
				waitAcceptDialed(t, bg, l)
			}
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			pending := acceptAsync(ctx, l)
			select {
			case r := <-pending:
				t.Fatalf("Accept returned early: %v, %v", r.c, r.err)
			case <-time.After(50 * time.Millisecond):
			}
			want := context.Canceled
			if tt.byClose {
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
			if tt.byClose {
				if _, err := l.AcceptSource(bg); !errors.Is(err, net.ErrClosed) {
					t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
				}
				return
			}
			// The cancelled Accept must not leave its deadline behind.
			if tt.maxConns == 0 {
				cl := dial(t, l.Addr())
				c := waitAccept(t, acceptAsync(bg, l), 5*time.Second)
				if c.Name() != "tcp://"+cl.LocalAddr().String() {
					t.Errorf("accepted %s, want %s", c.Name(), cl.LocalAddr())
				}
			}
		})
	}
}

// exhaustFDs lowers RLIMIT_NOFILE and opens /dev/null until the process
// has no descriptor left. It returns the files so the test can free some;
// cleanup closes them and restores the limit.
func exhaustFDs(t *testing.T) []*os.File {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	probe, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	lowest := probe.Fd()
	probe.Close()
	lim := old
	lim.Cur = uint64(lowest) + 64
	if lim.Cur > old.Cur {
		t.Skipf("RLIMIT_NOFILE %d is too low to test with", old.Cur)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	var files []*os.File
	t.Cleanup(func() {
		for _, f := range files {
			f.Close()
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	})
	for range lim.Cur {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	t.Fatalf("opened %d files under a limit of %d without EMFILE", len(files), lim.Cur)
	return nil
}

// TestListenerSurvivesEMFILE runs the process out of descriptors for real:
// Accept must log, back off instead of spinning, and accept again once
// descriptors are free; closing one of its own connections must end the
// back-off at once.
func TestListenerSurvivesEMFILE(t *testing.T) {
	logs := make(logRecords, 1024)
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{Logger: slog.New(logs)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// All client sockets exist before the descriptors run out; their
	// handshakes complete in the kernel's backlog.
	held := waitAcceptDialed(t, ctx, l)
	cl2 := dial(t, l.Addr())
	cl3 := dial(t, l.Addr())

	// Phase 1: no descriptor; freeing unrelated ones lets the back-off
	// timer find the connection.
	files := exhaustFDs(t)
	start := time.Now()
	pending := acceptAsync(ctx, l)
	var delays []time.Duration
	for len(delays) < 4 {
		r := nextLog(t, logs)
		if err, _ := attr(r, "err").Any().(error); !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("logged %q with err %v, want EMFILE", r.Message, attr(r, "err"))
		}
		delays = append(delays, attr(r, "delay").Duration())
		// One shortage: the first failure warns, the rest are details.
		want := slog.LevelDebug
		if len(delays) == 1 {
			want = slog.LevelWarn
		}
		if r.Level != want {
			t.Errorf("failure %d logged at %v, want %v", len(delays), r.Level, want)
		}
	}
	// Four failures cost at least the first three back-offs; a spinning
	// accept loop would log them within microseconds.
	if want := []time.Duration{5, 10, 20, 40}; delays[0] != want[0]*time.Millisecond || delays[3] != want[3]*time.Millisecond {
		t.Errorf("back-off delays %v, want 5ms doubling", delays)
	}
	if el := time.Since(start); el < 35*time.Millisecond {
		t.Errorf("4 accept failures within %v: not backing off", el)
	}
	select {
	case r := <-pending:
		t.Fatalf("Accept returned while out of descriptors: %v, %v", r.c, r.err)
	default:
	}
	files[len(files)-1].Close()
	files[len(files)-2].Close()
	files = files[:len(files)-2]
	c2 := waitAccept(t, pending, 5*time.Second)
	if c2.Name() != "tcp://"+cl2.LocalAddr().String() {
		t.Errorf("accepted %s, want %s", c2.Name(), cl2.LocalAddr())
	}

	// Phase 2: out of descriptors again, until the back-off reaches its
	// 1s ceiling; then closing one of the listener's own connections must
	// wake Accept well before the timer would.
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		files = append(files, f)
	}
	drain(logs)
	pending = acceptAsync(ctx, l)
	for {
		r := nextLog(t, logs)
		if attr(r, "delay").Duration() == time.Second {
			break
		}
	}
	closed := time.Now()
	held.Close()
	c3 := waitAccept(t, pending, 5*time.Second)
	if el := time.Since(closed); el > 500*time.Millisecond {
		t.Errorf("Accept took %v after a connection closed; the back-off was not cut short", el)
	}
	if c3.Name() != "tcp://"+cl3.LocalAddr().String() {
		t.Errorf("accepted %s, want %s", c3.Name(), cl3.LocalAddr())
	}
	for _, f := range files {
		f.Close()
	}
}

func waitAcceptDialed(t *testing.T, ctx context.Context, l *srcs.Listener) srcs.Source {
	t.Helper()
	dial(t, l.Addr())
	return waitAccept(t, acceptAsync(ctx, l), 5*time.Second)
}

func nextLog(t *testing.T, logs logRecords) slog.Record {
	t.Helper()
	select {
	case r := <-logs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no log record in 10s")
	}
	return slog.Record{}
}

func drain(logs logRecords) {
	for {
		select {
		case <-logs:
		default:
			return
		}
	}
}

func TestListenTCPErrors(t *testing.T) {
	if _, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{MaxConns: -1}); err == nil {
		t.Error("MaxConns -1 accepted")
	}
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{})
	if _, err := srcs.ListenTCP(l.Addr().String(), srcs.ListenerConfig{}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listen on a used port = %v, want EADDRINUSE", err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestListenErrors: a listen that fails says the operation and the
// address once, and Go's *net.OpError stays reachable.
func TestListenErrors(t *testing.T) {
	missingDir := filepath.Join(t.TempDir(), "missing", "x.sock")
	for _, tc := range []struct {
		name   string
		listen func() error
		want   string
	}{
		{"tcp port out of range", func() error { _, err := srcs.ListenTCP("127.0.0.1:99999", srcs.ListenerConfig{}); return err },
			"srcs: listen tcp 127.0.0.1:99999: invalid port"},
		{"tcp without a port", func() error { _, err := srcs.ListenTCP("127.0.0.1", srcs.ListenerConfig{}); return err },
			"srcs: listen tcp 127.0.0.1: missing port in address"},
		{"unix in a missing directory", func() error { _, err := srcs.ListenUnix(missingDir, srcs.ListenerConfig{}); return err },
			"srcs: listen unix " + missingDir + ": bind: no such file or directory"},
		{"udp port out of range", func() error { _, err := srcs.ListenUDP(srcs.UDPConfig{Addr: "127.0.0.1:99999"}); return err },
			"srcs: listen udp 127.0.0.1:99999: invalid port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.listen()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
			var op *net.OpError
			if !errors.As(err, &op) {
				t.Errorf("%v: no *net.OpError inside", err)
			}
		})
	}
}
