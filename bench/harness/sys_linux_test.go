package harness

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// TestRxBacklog: bytes written to an accepted connection that nobody
// reads show in the backlog of the listener's port, and are gone once
// read.
func TestRxBacklog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(p)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 10000
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	// Loopback delivers at once; allow the softirq a moment on a busy
	// machine.
	var q int64
	var socks int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if q, socks = rxBacklog(port); q >= n {
			break
		}
	}
	if q != n || socks != 1 {
		t.Fatalf("rxBacklog = %d bytes on %d sockets, want %d on 1", q, socks, n)
	}
	buf := make([]byte, n)
	for got := 0; got < n; {
		k, err := s.Read(buf[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	if q, _ = rxBacklog(port); q != 0 {
		t.Errorf("rxBacklog after reading everything = %d, want 0", q)
	}
}
