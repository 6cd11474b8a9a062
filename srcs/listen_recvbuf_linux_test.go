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
	if _, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{RecvBuffer: -1}); err == nil || !strings.Contains(err.Error(), "RecvBuffer") {
		t.Errorf("negative RecvBuffer: %v, want an error naming RecvBuffer", err)
	}
}
