package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/internal/testkit/exampletest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestClienttail runs the program against a server that sends lines over
// three connections, hanging up after each, after it refused the first
// dials, and a file that grows while it runs. Every connection is counted, every
// line of the file is, and on SIGINT the tail's place is saved past the
// last line.
func TestClienttail(t *testing.T) { exampletest.ForRunners(t, testClienttail) }

func testClienttail(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "app.log")
	if err := os.WriteFile(log, []byte(strings.Repeat("an old line\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused at first

	p := exampletest.Start(t, exampletest.Build(t), "-addr", addr, "-tail", log)
	p.WaitLine("dialing ")
	p.WaitLine("clienttail: source 1 (tcp://" + addr + "): open: ") // refused, reported

	const conns, lines = 3, 5000
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer ln.Close()
	for i := range conns {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(strings.Repeat(fmt.Sprintf("line of connection %d\n", i+1), lines)))
		c.Close()
		p.WaitStdout("the connection's count", func(out string) bool {
			return strings.Contains(out, fmt.Sprintf("connection %d: %d lines\n", i+1, lines))
		})
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(strings.Repeat("a new line\n", 50))
	f.Close()
	size := 100*len("an old line\n") + 50*len("a new line\n")
	p.WaitLine("clienttail: source 1 (tcp://" + addr + "): open: engine: connected again after ")
	// A drain stops the tail where it is: the new lines must have been
	// read before SIGINT for the count to hold them. The checkpoint,
	// saved every second for released bytes, says when they were.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ck, _ := os.ReadFile(log + ".ckpt")
		if strings.Contains(string(ck), fmt.Sprintf(`"offset":%d`, size)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tail's checkpoint is %s, not yet at the offset %d", ck, size)
		}
	}

	out, err := p.Interrupt()
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, p.Stderr())
	}
	// A fourth connection, open and silent at the drain, counts no line.
	want := fmt.Sprintf("%s: %d connections, %d lines; %s: 150 lines\n", addr, conns, conns*lines, log)
	if !strings.HasSuffix(out, want) {
		t.Errorf("output:\n%s\nwant it to end %q", out, want)
	}
	ck, err := os.ReadFile(log + ".ckpt")
	if err != nil || !strings.Contains(string(ck), fmt.Sprintf(`"offset":%d`, size)) {
		t.Errorf("checkpoint %s (%v), want the offset %d", ck, err, size)
	}
}
