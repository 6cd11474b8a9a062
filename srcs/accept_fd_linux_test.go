package srcs_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// fdResult is what AcceptDescriptor returned.
type fdResult struct {
	src srcs.Source
	err error
}

// acceptFD runs AcceptDescriptor in the background.
func acceptFD(ctx context.Context, l *srcs.Listener) <-chan fdResult {
	ch := make(chan fdResult, 1)
	go func() {
		src, err := l.AcceptDescriptor(ctx)
		ch <- fdResult{src, err}
	}()
	return ch
}

// waitFD waits for a source from acceptFD and checks that it is a raw
// descriptor with no net.Conn behind it, and returns its descriptor.
func waitFD(t *testing.T, ch <-chan fdResult, within time.Duration) (srcs.Source, int) {
	t.Helper()
	var r fdResult
	select {
	case r = <-ch:
	case <-time.After(within):
		t.Fatalf("AcceptDescriptor did not return within %v", within)
	}
	if r.err != nil {
		t.Fatalf("AcceptDescriptor: %v", r.err)
	}
	src := r.src
	t.Cleanup(func() { src.Close() })
	if _, ok := src.(syscall.Conn); ok {
		t.Errorf("%T offers a syscall.Conn: a net.Conn is behind it", src)
	}
	d, ok := src.(contract.Descriptor)
	if !ok {
		t.Fatalf("%T is no Descriptor", src)
	}
	desc, err := d.Desc()
	if err != nil || desc.Kind != contract.Stream {
		t.Fatalf("Desc = %+v, %v", desc, err)
	}
	fl, err := unix.FcntlInt(uintptr(desc.FD), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK == 0 {
		t.Errorf("accepted descriptor flags %#x, %v: want non-blocking", fl, err)
	}
	return src, desc.FD
}

// readSome waits for fd to be readable and reads it through the source.
func readSome(t *testing.T, src srcs.Source, fd int) string {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 5000); n != 1 || err != nil {
		t.Fatalf("poll = %d, %v", n, err)
	}
	buf := make([]byte, 64)
	n, err := src.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestAcceptDescriptor accepts TCP and unix connections as raw
// descriptors: named by the peer as Accept names them, readable, framed
// as the listener says, and closed once however often Close is called.
func TestAcceptDescriptor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("tcp", func(t *testing.T) {
		l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{Framer: srcs.Newline{Max: 100}})
		c := dial(t, l.Addr())
		src, fd := waitFD(t, acceptFD(ctx, l), 5*time.Second)
		if got, want := src.Name(), "tcp://"+c.LocalAddr().String(); got != want {
			t.Errorf("name %q, want the peer %q", got, want)
		}
		if fs, ok := src.(srcs.Framed); !ok || fs.Framer() == nil {
			t.Errorf("the listener's framer is not the connection's")
		}
		c.Write([]byte("hello\n"))
		if got := readSome(t, src, fd); got != "hello\n" {
			t.Errorf("read %q", got)
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
		if err := src.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := src.Open(ctx); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Open after Close = %v, want net.ErrClosed", err)
		}
		if st := l.Stats(); st.Accepted != 1 {
			t.Errorf("stats %+v, want 1 accepted", st)
		}
	})
	t.Run("unix", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s")
		l, err := srcs.ListenUnix(path, srcs.ListenerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		src, fd := waitFD(t, acceptFD(ctx, l), 5*time.Second)
		if got, want := src.Name(), "unix://"+path; got != want {
			t.Errorf("name %q, want %q", got, want)
		}
		c.Write([]byte("x"))
		if got := readSome(t, src, fd); got != "x" {
			t.Errorf("read %q", got)
		}
	})
}

// TestAcceptDescriptorKeepAlive checks that a connection accepted without
// Go's net.Conn still probes an idle peer as Go's do: the listener's
// socket carries the keepalive settings, and accepted sockets inherit
// them.
func TestAcceptDescriptorKeepAlive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{})
	dial(t, l.Addr())
	_, fd := waitFD(t, acceptFD(ctx, l), 5*time.Second)
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
	} {
		if v, err := unix.GetsockoptInt(fd, o.level, o.opt); err != nil || v != o.want {
			t.Errorf("%s on the accepted socket = %d, %v; want %d", o.name, v, err, o.want)
		}
	}
}

// TestAcceptDescriptorCap checks MaxConns: at the cap AcceptDescriptor
// waits until a connection closes, and a connection closed twice frees
// one slot.
func TestAcceptDescriptorCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{MaxConns: 1})
	dial(t, l.Addr())
	first, _ := waitFD(t, acceptFD(ctx, l), 5*time.Second)
	second := dial(t, l.Addr())
	pending := acceptFD(ctx, l)
	select {
	case r := <-pending:
		t.Fatalf("AcceptDescriptor returned %v, %v past MaxConns", r.src, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close()
	src, _ := waitFD(t, pending, 5*time.Second)
	if got, want := src.Name(), "tcp://"+second.LocalAddr().String(); got != want {
		t.Errorf("accepted %s, want the second client %s", got, want)
	}
	dial(t, l.Addr())
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if src, err := l.AcceptDescriptor(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcceptDescriptor with the cap reached = %v, %v; want a deadline error (double Close freed two slots?)", src, err)
	}
}

// TestAcceptDescriptorAllow checks that Allow closes and counts a peer
// outside it at accept, and lets the others through.
func TestAcceptDescriptorAllow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{Allow: []string{"127.0.0.2/32"}})
	denied := dialFrom(t, "127.0.0.1", l.Addr())
	allowed := dialFrom(t, "127.0.0.2", l.Addr())
	src, _ := waitFD(t, acceptFD(ctx, l), 5*time.Second)
	if got, want := src.Name(), "tcp://"+allowed.LocalAddr().String(); got != want {
		t.Errorf("accepted %s, want %s", got, want)
	}
	denied.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := denied.Read(make([]byte, 1)); err == nil {
		t.Error("the denied peer's connection stayed open")
	}
	if st := l.Stats(); st.Denied != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v, want 1 denied and 1 accepted", st)
	}
}

// TestAcceptDescriptorSurvivesEMFILE runs out of descriptors for real:
// AcceptDescriptor backs off and logs, and accepts once descriptors are
// free.
func TestAcceptDescriptorSurvivesEMFILE(t *testing.T) {
	logs := make(logRecords, 1024)
	l := listen(t, "127.0.0.1:0", srcs.ListenerConfig{Logger: slog.New(logs)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := dial(t, l.Addr())
	files := exhaustFDs(t)
	pending := acceptFD(ctx, l)
	for range 3 {
		r := nextLog(t, logs)
		if err, _ := attr(r, "err").Any().(error); !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("logged %q with err %v, want EMFILE", r.Message, attr(r, "err"))
		}
	}
	select {
	case r := <-pending:
		t.Fatalf("AcceptDescriptor returned %v, %v while out of descriptors", r.src, r.err)
	default:
	}
	files[len(files)-1].Close()
	files = files[:len(files)-1]
	src, _ := waitFD(t, pending, 5*time.Second)
	if got, want := src.Name(), "tcp://"+cl.LocalAddr().String(); got != want {
		t.Errorf("accepted %s, want %s", got, want)
	}
}
