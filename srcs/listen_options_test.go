package srcs_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// TestListenTCPReusePort: two listeners with ReusePort share one port, a
// third without it is refused, and the kernel spreads connections over
// both sharers.
func TestListenTCPReusePort(t *testing.T) {
	a, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{ReusePort: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addr := a.Addr().String()
	b, err := srcs.ListenTCP(addr, srcs.ListenerConfig{ReusePort: true})
	if err != nil {
		t.Fatalf("second listener with ReusePort on %s: %v", addr, err)
	}
	defer b.Close()
	if c, err := srcs.ListenTCP(addr, srcs.ListenerConfig{}); err == nil {
		c.Close()
		t.Fatal("a listener without ReusePort shared the port")
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listener without ReusePort: %v, want EADDRINUSE", err)
	}

	const conns = 64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan int, conns) // which listener took a connection
	done := make(chan struct{}, 2)
	for i, l := range []*srcs.Listener{a, b} {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				c, err := l.AcceptSource(ctx)
				if err != nil {
					return
				}
				c.Close()
				accepted <- i
			}
		}()
	}
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	var per [2]int
	for range conns {
		select {
		case i := <-accepted:
			per[i]++
		case <-ctx.Done():
			t.Fatalf("accepted %v of %d", per, conns)
		}
	}
	cancel()
	<-done
	<-done
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("connections per listener: %v, want both listeners used", per)
	}
}
