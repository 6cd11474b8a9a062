package main

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/internal/testkit/exampletest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLinecount runs the program against real load: 20 connections that
// send 1,000 lines each and hang up, and 20 that send a line and stay
// open. On SIGINT it drains, so every connection's count is printed, the
// open ones' too, and the totals are exact.
func TestLinecount(t *testing.T) { exampletest.ForRunners(t, testLinecount) }

func testLinecount(t *testing.T) {
	p := exampletest.Start(t, exampletest.Build(t), "-listen", "127.0.0.1:0")
	addr := strings.TrimSpace(p.WaitLine("listening on "))
	const closed, open, lines = 20, 20, 1000
	line := strings.Repeat("x", 99) + "\n"
	var idle []net.Conn
	for range open {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	for _, c := range idle {
		p.WaitLine("tcp://" + c.LocalAddr().String() + " sends")
	}
	errs := make(chan error, closed)
	for range closed {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			_, err = c.Write([]byte(strings.Repeat(line, lines)))
			c.Close()
			errs <- err
		}()
	}
	for range closed {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p.WaitStdout("the closed connections' counts", func(out string) bool {
		return strings.Count(out, fmt.Sprintf(": %d lines\n", lines)) == closed
	})
	out, err := p.Interrupt()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, p.Stderr())
	}
	if got := strings.Count(out, ": 1 lines\n"); got != open {
		t.Errorf("%d open connections counted at the drain, want %d:\n%s", got, open, out)
	}
	want := fmt.Sprintf("%d connections, %d lines\n", closed+open, closed*lines+open)
	if !strings.HasSuffix(out, want) {
		t.Errorf("output ends %q, want %q", out[max(0, len(out)-80):], want)
	}
}
