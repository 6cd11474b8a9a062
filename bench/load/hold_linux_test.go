package load

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
)

// TestHold opens connections to two listeners from two local addresses,
// holds them without writing until its context ends, and closes them.
func TestHold(t *testing.T) {
	var lns []net.Listener
	var mu sync.Mutex
	accepted := map[string]int{} // by listener
	var conns []net.Conn
	var wg sync.WaitGroup
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				accepted[ln.Addr().String()]++
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	c := DefaultHoldConfig()
	c.To = report.StringList{lns[0].Addr().String(), lns[1].Addr().String()}
	c.From = report.StringList{"127.0.0.1", "127.0.0.2"}
	c.Conns = 40
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var errOut strings.Builder
	var errMu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- Hold(ctx, c, harness.IO{Out: &lockedWriter{w: &errOut, mu: &errMu}, Err: &lockedWriter{w: &errOut, mu: &errMu}})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		errMu.Lock()
		held := strings.Contains(errOut.String(), "holding 40 connections")
		errMu.Unlock()
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hold never said it held its connections: %q", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if accepted[lns[0].Addr().String()] != 20 || accepted[lns[1].Addr().String()] != 20 {
		t.Errorf("accepted %v; want 20 on each listener", accepted)
	}
	for _, sc := range conns {
		if a := sc.RemoteAddr().(*net.TCPAddr).IP.String(); a != "127.0.0.1" && a != "127.0.0.2" {
			t.Errorf("a connection from %s, not a --from address", a)
		}
	}
	mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Hold closed its connections: each server side reads EOF, having
	// read nothing before it.
	mu.Lock()
	defer mu.Unlock()
	for _, sc := range conns {
		sc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := sc.Read(make([]byte, 1)); n != 0 || err == nil || !strings.Contains(err.Error(), "EOF") {
			t.Errorf("after hold ended, a server read gave %d bytes, %v; want EOF", n, err)
		}
		sc.Close()
	}
	for _, ln := range lns {
		ln.Close()
	}
	wg.Wait()
}

func TestHoldConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		c    HoldConfig
		want string
	}{
		{HoldConfig{From: report.StringList{"127.0.0.1"}, Conns: 1}, "--to: at least one"},
		{HoldConfig{To: report.StringList{"nowhere"}, From: report.StringList{"127.0.0.1"}, Conns: 1}, "--to: \"nowhere\""},
		{HoldConfig{To: report.StringList{"127.0.0.1:9"}, From: report.StringList{"localhost"}, Conns: 1}, "--from: \"localhost\": not an IP address"},
		{HoldConfig{To: report.StringList{"127.0.0.1:9"}, From: report.StringList{"127.0.0.1"}}, "--conns: 0"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.c, err, tc.want)
		}
	}
	// A refused connection names the pair and the count.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := HoldConfig{To: report.StringList{addr}, From: report.StringList{"127.0.0.1"}, Conns: 3}
	err = Hold(t.Context(), c, harness.IO{Out: &strings.Builder{}, Err: &strings.Builder{}})
	if err == nil || !strings.Contains(err.Error(), "connection 1 of 3, from 127.0.0.1 to "+addr) {
		t.Errorf("hold against a closed port: %v", err)
	}
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
