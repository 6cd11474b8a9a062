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

// TestSlowcount runs the program against 50 clients that send as fast as
// they can into a handler that takes a millisecond a chunk: every line
// is counted, every connection's end is handled before Shutdown returns,
// and the totals are exact.
func TestSlowcount(t *testing.T) { exampletest.ForRunners(t, testSlowcount) }

func testSlowcount(t *testing.T) {
	p := exampletest.Start(t, exampletest.Build(t), "-listen", "127.0.0.1:0")
	addr := strings.TrimSpace(p.WaitLine("listening on "))
	const clients, lines = 50, 20000
	line := strings.Repeat("y", 63) + "\n"
	errs := make(chan error, clients)
	for range clients {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			_, err = c.Write([]byte(strings.Repeat(line, lines))) // 1.25 MiB, at once
			c.Close()
			errs <- err
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p.WaitStdout("every connection's count", func(out string) bool {
		return strings.Count(out, fmt.Sprintf(": %d lines\n", lines)) == clients
	})
	out, err := p.Interrupt()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, p.Stderr())
	}
	if want := fmt.Sprintf("%d connections, %d lines\n", clients, clients*lines); !strings.HasSuffix(out, want) {
		t.Errorf("output ends %q, want %q", out[max(0, len(out)-80):], want)
	}
}
