package srcs_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// listenUDP binds a UDP source on a free loopback port and dials it.
func listenUDP(t *testing.T, cfg srcs.UDPConfig) (*srcs.UDPSource, *net.UDPConn) {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	s, err := srcs.ListenUDP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := net.DialUDP("udp", nil, s.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

func TestListenUDPConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   srcs.UDPConfig
		field string
	}{
		{"no address", srcs.UDPConfig{}, "Addr"},
		{"negative read buffer", srcs.UDPConfig{Addr: "127.0.0.1:0", ReadBuffer: -1}, "ReadBuffer"},
		{"negative max", srcs.UDPConfig{Addr: "127.0.0.1:0", MaxDatagram: -1}, "MaxDatagram"},
		{"max too large", srcs.UDPConfig{Addr: "127.0.0.1:0", MaxDatagram: 70000}, "MaxDatagram"},
		{"bad address", srcs.UDPConfig{Addr: "127.0.0.1:99999"}, "listen udp"},
	} {
		s, err := srcs.ListenUDP(tc.cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s: ListenUDP succeeded", tc.name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "srcs: listen udp") || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q does not name %s", tc.name, err, tc.field)
		}
	}
}

func TestUDPSourceRead(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			if strings.HasPrefix(addr, "[") {
				if ln, err := net.ListenPacket("udp6", addr); err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				} else {
					ln.Close()
				}
			}
			s, c := listenUDP(t, srcs.UDPConfig{Addr: addr, MaxDatagram: 1000})
			if s.MaxDatagram() != 1000 || !strings.HasPrefix(s.Name(), "udp://") {
				t.Errorf("MaxDatagram %d, Name %q", s.MaxDatagram(), s.Name())
			}
			if err := s.Open(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{"one", "", "three"} {
				if _, err := c.Write([]byte(d)); err != nil {
					t.Fatal(err)
				}
			}
			s.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			for _, want := range []string{"one", "", "three"} {
				n, err := s.Read(buf)
				if err != nil || string(buf[:n]) != want {
					t.Fatalf("Read = %q, %v; want %q: one datagram per Read", buf[:n], err, want)
				}
			}

			// Too long for the buffer: an error, and the next one is whole.
			c.Write(bytes.Repeat([]byte("x"), 200))
			c.Write([]byte("next"))
			if n, err := s.Read(buf); !errors.Is(err, srcs.ErrDatagramTooLarge) || n != len(buf) {
				t.Errorf("Read of a long datagram = %d, %v; want %d, ErrDatagramTooLarge", n, err, len(buf))
			}
			if n, trunc, err := s.ReadDatagram(buf); err != nil || trunc || string(buf[:n]) != "next" {
				t.Errorf("ReadDatagram = %q, %v, %v; want \"next\"", buf[:n], trunc, err)
			}
			c.Write(bytes.Repeat([]byte("y"), 101))
			if n, trunc, err := s.ReadDatagram(buf); err != nil || !trunc || n != len(buf) {
				t.Errorf("ReadDatagram of a long datagram = %d, %v, %v; want truncated", n, trunc, err)
			}

			// The deadline interrupts a blocked Read.
			s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("Read past the deadline: %v", err)
			}
		})
	}
}

func TestUDPSourceDesc(t *testing.T) {
	s, c := listenUDP(t, srcs.UDPConfig{})
	if s.MaxDatagram() != srcs.MaxUDPPayload {
		t.Errorf("default MaxDatagram = %d", s.MaxDatagram())
	}
	if _, err := s.SyscallConn(); err != nil {
		t.Fatalf("SyscallConn before Desc: %v", err)
	}
	d, err := s.Desc()
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != contract.Datagram || d.FD < 0 {
		t.Fatalf("Desc = %+v", d)
	}
	if d2, err := s.Desc(); err != nil || d2 != d {
		t.Errorf("second Desc = %+v, %v; want %+v", d2, err, d)
	}
	if _, err := s.Read(make([]byte, 10)); err == nil {
		t.Error("Read after Desc succeeded")
	}
	if _, err := s.SyscallConn(); err == nil {
		t.Error("SyscallConn after Desc succeeded")
	}
	if err := s.SetReadDeadline(time.Now()); err != nil {
		t.Errorf("SetReadDeadline after Desc: %v", err)
	}
	// The descriptor is non-blocking and still bound.
	buf := make([]byte, 10)
	if _, _, err := unix.Recvfrom(d.FD, buf, 0); err != unix.EAGAIN {
		t.Errorf("recvfrom on an empty detached socket: %v, want EAGAIN", err)
	}
	c.Write([]byte("hi"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _, err := unix.Recvfrom(d.FD, buf, 0)
		if err == nil {
			if string(buf[:n]) != "hi" {
				t.Errorf("detached read %q", buf[:n])
			}
			break
		}
		if err != unix.EAGAIN || time.Now().After(deadline) {
			t.Fatalf("detached read: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Open(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Open after Close: %v", err)
	}
	if _, err := s.Desc(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Desc after Close: %v", err)
	}
	if _, err := s.Drops(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Drops after Close: %v", err)
	}
}

// TestUDPSourceDrops overflows a tiny receive buffer and checks that Drops
// reports what the kernel threw away: read plus dropped is what was sent.
func TestUDPSourceDrops(t *testing.T) {
	s, c := listenUDP(t, srcs.UDPConfig{ReadBuffer: 1})
	n, err := s.Drops()
	if runtime.GOOS != "linux" {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Drops on %s: %v, want ErrUnsupported", runtime.GOOS, err)
		}
		return
	}
	if err != nil || n != 0 {
		t.Fatalf("Drops of a new socket = %d, %v", n, err)
	}
	const sent = 100
	payload := bytes.Repeat([]byte("d"), 1000)
	for range sent {
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	buf := make([]byte, 2000)
	for {
		s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := s.Read(buf); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			break
		}
		got++
	}
	dropped, err := s.Drops()
	if err != nil {
		t.Fatal(err)
	}
	if dropped == 0 || got+int(dropped) != sent {
		t.Errorf("read %d and dropped %d of %d sent; want drops, adding up", got, dropped, sent)
	}
}
