package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docFiles returns README.md and every docs/*.md, relative to the
// repository's root: the files whose commands TestREADME runs.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(f, filepath.Join("..", "..")+string(filepath.Separator))))
	}
	return out
}

// shBlocks returns the sh blocks of the markdown file name (relative to
// the repository's root), in order, but for those behind a "TestREADME
// does not run" comment.
func shBlocks(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	re := regexp.MustCompile("(?s)(<!-- TestREADME does not run[^>]*-->\n)?```sh\n(.*?)```")
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if m[1] == "" {
			blocks = append(blocks, m[2])
		}
	}
	return blocks
}

// docWants names the files whose commands must run, with what their
// output must hold: the node (build, check, start, send, scrape, drain),
// a node behind TLS and a password refusing a connection, the same node
// publishing into JetStream, and the framing sink.
var docWants = map[string][]string{
	"docs/node.md":      {"sluice_bytes_received_total 1.000006e+06", "msg=drained", `"offset":6`},
	"docs/trust.md":     {"401 without a password", "400 in plaintext", `sluice_listener_refused_total{listener="127.0.0.1:9402",reason="denied"} 1`},
	"docs/jetstream.md": {"msg=drained"},
	"docs/framing.md":   {`"records": 2`, `"truncated_bytes": 5`},
}

// TestREADME runs the commands of README.md and of every docs/*.md as
// written: each file's sh blocks, one after the other, in one
// non-interactive bash script from the repository's root, a script per
// file. A block behind a "TestREADME does not run" comment (a benchmark,
// make test itself, a node left running) is shown, not run.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the commands and runs nodes, a sink and a NATS server")
	}
	for _, tool := range []string{"bash", "make", "curl", "nats-server", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps installs it)", tool)
		}
	}
	ran := map[string]bool{}
	for _, name := range docFiles(t) {
		blocks := shBlocks(t, name)
		if len(blocks) == 0 {
			continue
		}
		ran[name] = true
		t.Run(name, func(t *testing.T) {
			out := runScript(t, "set -euo pipefail\n"+strings.Join(blocks, "\n"))
			for _, want := range docWants[name] {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
	for name := range docWants {
		if !ran[name] {
			t.Errorf("%s: no sh block to run", name)
		}
	}
}

// runScript runs script with bash from the repository's root and returns
// its output; whatever it left running (a node, nats-server, a sink) goes
// with its process group.
func runScript(t *testing.T, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = filepath.Join("..", "..")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	defer func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the commands: %v\nscript:\n%s\noutput:\n%s", err, script, out)
	}
	return string(out)
}
