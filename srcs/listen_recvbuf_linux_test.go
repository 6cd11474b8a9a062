//go:build linux

package srcs_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// TestListenTCPRecvBuffer: connections accepted by a listener with
// RecvBuffer start with at least that receive buffer (the kernel doubles
// the request), larger than the autotuned default they get without it.
func TestListenTCPRecvBuffer(t *testing.T) {
	const want = 1 << 20
	rcvbuf := func(cfg srcs.ListenerConfig) int {
		t.Helper()
		l, err := srcs.ListenTCP("127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ac, err := l.AcceptSource(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		d, err := ac.(contract.Descriptor).Desc()
		if err != nil {
			t.Fatal(err)
		}
		n, err := unix.GetsockoptInt(d.FD, unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if b, err := os.ReadFile("/proc/sys/net/core/rmem_max"); err == nil {
		if max, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && max < want {
			t.Skipf("net.core.rmem_max is %d, below the %d this test asks for", max, want)
		}
	}
	if got := rcvbuf(srcs.ListenerConfig{RecvBuffer: want}); got < want {
		t.Errorf("accepted connection's SO_RCVBUF = %d, want at least %d", got, want)
	}
	if got := rcvbuf(srcs.ListenerConfig{}); got >= want {
		t.Errorf("without RecvBuffer SO_RCVBUF = %d; the test needs a default below %d", got, want)
	}
}

// TestListenTCPRecvBufferAuto: with RecvBuffer zero a listener leaves its
// first connections to the kernel's autotuning, and once it holds 16 at
// once gives the ones it accepts from then on a set buffer of 256 KiB
// (the kernel doubles it), for good, even after they close; with
// RecvBuffer negative it never sets one.
func TestListenTCPRecvBufferAuto(t *testing.T) {
	const auto, after = 256 << 10, 16
	if b, err := os.ReadFile("/proc/sys/net/core/rmem_max"); err == nil {
		if max, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && max < auto {
			t.Skipf("net.core.rmem_max is %d, below the %d the listener sets", max, auto)
		}
	}
	var dflt int
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_rmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			dflt, _ = strconv.Atoi(f[1])
		}
	}
	if dflt == 2*auto {
		t.Skipf("net.ipv4.tcp_rmem's default is %d, the size the listener sets", dflt)
	}
	for _, tc := range []struct {
		name string
		cfg  srcs.ListenerConfig
		set  bool // the connections after the first 16 get the set buffer
	}{
		{"auto", srcs.ListenerConfig{}, true},
		{"autotuned", srcs.ListenerConfig{RecvBuffer: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := srcs.ListenTCP("127.0.0.1:0", tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// accept opens a connection and returns the accepted side's
			// SO_RCVBUF; the caller closes both.
			var open []func()
			defer func() {
				for _, c := range open {
					c()
				}
			}()
			accept := func() int {
				t.Helper()
				c, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				ac, err := l.AcceptSource(ctx)
				if err != nil {
					t.Fatal(err)
				}
				open = append(open, func() { ac.Close(); c.Close() })
				d, err := ac.(contract.Descriptor).Desc()
				if err != nil {
					t.Fatal(err)
				}
				n, err := unix.GetsockoptInt(d.FD, unix.SOL_SOCKET, unix.SO_RCVBUF)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			for i := range after {
				if got := accept(); got == 2*auto {
					t.Fatalf("connection %d of %d: SO_RCVBUF %d, the set buffer, before the listener held %d", i+1, after, got, after)
				}
			}
			got := accept()
			if tc.set && got != 2*auto {
				t.Errorf("connection %d: SO_RCVBUF %d, want the set %d", after+1, got, 2*auto)
			}
			if !tc.set && got == 2*auto {
				t.Errorf("connection %d: SO_RCVBUF %d with RecvBuffer -1, want the autotuned default", after+1, got)
			}
			// Once set, for good: every connection closed, the next one
			// still gets it.
			for _, c := range open {
				c()
			}
			open = nil
			if got := accept(); tc.set && got != 2*auto {
				t.Errorf("after every connection closed: SO_RCVBUF %d, want the set %d", got, 2*auto)
			}
		})
	}
}
