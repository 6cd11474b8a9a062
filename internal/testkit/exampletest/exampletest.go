// Package exampletest runs the example programs of examples/ for their
// tests, as a user runs them: built with go build, started as a process,
// stopped with SIGINT. Only tests import it.
package exampletest

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the program in the test's package directory and returns
// its path, in a directory the test removes.
func Build(t testing.TB) string {
	t.Helper()
	return BuildPackage(t, ".")
}

// BuildPackage builds the program pkg (a path relative to the test's
// package directory, such as "./testdata/twin") with go build and the
// flags given, and returns its path, in a directory the test removes.
func BuildPackage(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example")
	args := append(append([]string{"build", "-o", bin}, flags...), pkg)
	cmd := exec.Command(GoTool(), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// GoTool is the go command that runs the test.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// Proc is a running example.
type Proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr []string // lines
	ended  bool     // standard error is closed: the program ended
	done   chan error
}

// Start starts bin with args. It fails the test if the program has not
// exited by the end of the test.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	p.cmd.Stdout = &lockedWriter{mu: &p.mu, w: &p.stdout}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr = append(p.stderr, sc.Text())
			p.mu.Unlock()
		}
		p.mu.Lock()
		p.ended = true
		p.mu.Unlock()
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// WaitLine waits until a line of standard error, one already written or
// a later one, begins with prefix, and returns the rest of the first
// such line.
func (p *Proc) WaitLine(prefix string) string {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		lines, ended := p.stderr, p.ended
		p.mu.Unlock()
		for _, l := range lines {
			if rest, found := strings.CutPrefix(l, prefix); found {
				return rest
			}
		}
		switch {
		case ended:
			p.t.Fatalf("the program ended before it said %q:\n%s", prefix, p.Stderr())
		case time.Now().After(deadline):
			p.t.Fatalf("the program did not say %q in 30s:\n%s", prefix, p.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stdout returns what the program wrote to standard output so far.
func (p *Proc) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

// Stderr returns the program's standard error so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// WaitStdout waits until cond holds for what the program wrote to
// standard output.
func (p *Proc) WaitStdout(what string, cond func(string) bool) {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond(p.Stdout()) {
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s; output:\n%s\nstandard error:\n%s", what, p.Stdout(), p.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Interrupt sends SIGINT, as Ctrl-C does, and waits for the program to
// exit. It returns the exit error (nil for status 0) and the output.
func (p *Proc) Interrupt() (string, error) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		p.t.Fatal(err)
	}
	select {
	case err := <-p.done:
		return p.Stdout(), err
	case <-time.After(60 * time.Second):
		p.t.Fatalf("the program did not exit within 60s of SIGINT; output:\n%s\nstandard error:\n%s", p.Stdout(), p.Stderr())
	}
	return "", nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

// Runners are the runners the examples run under, through SLUICE_RUNNER:
// auto (uring where the kernel has it) and the three fallbacks.
var Runners = []string{"auto", "epoll", "goroutine", "thread"}

// ForRunners runs test once under each of Runners.
func ForRunners(t *testing.T, test func(t *testing.T)) {
	for _, r := range Runners {
		t.Run(r, func(t *testing.T) {
			t.Setenv("SLUICE_RUNNER", r)
			test(t)
		})
	}
}
