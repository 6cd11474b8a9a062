package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeSection returns the sh blocks of the README's section named
// heading (up to the next section of its level), in order, but for those
// behind a "TestREADME does not run" comment.
func readmeSection(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README: no %q", heading)
	}
	s = s[i+len(heading)+2:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	var blocks []string
	re := regexp.MustCompile("(?s)(<!-- TestREADME does not run[^>]*-->\n)?```sh\n(.*?)```")
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		if m[1] == "" {
			blocks = append(blocks, m[2])
		}
	}
	return blocks
}

// TestREADME runs every command the README's "Running in production"
// shows, as written, in one non-interactive bash script from the
// repository's root: build, check, start the example node, wait for it,
// send, scrape, drain; a node behind TLS and a password, refusing a
// connection; the same with JetStream.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs two nodes and a NATS server")
	}
	for _, tool := range []string{"bash", "make", "curl", "nats-server", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps installs it)", tool)
		}
	}
	blocks := readmeSection(t, "## Running in production")
	if len(blocks) < 4 {
		t.Fatalf("found %d sh blocks in Running in production", len(blocks))
	}
	script := "set -euo pipefail\n" + strings.Join(blocks, "\n")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = filepath.Join("..", "..")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Whatever the script left running (a node, nats-server) goes with
	// its process group.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	defer func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's commands: %v\nscript:\n%s\noutput:\n%s", err, script, out)
	}
	for _, want := range []string{"sluice_bytes_received_total 1.000006e+06", "msg=drained", `"offset":6`,
		"401 without a password", "400 in plaintext", `sluice_listener_refused_total{listener="127.0.0.1:9402",reason="denied"} 1`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
