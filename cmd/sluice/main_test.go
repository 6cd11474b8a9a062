package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "sluice-cmd-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(binDir)
		// goleak.VerifyTestMain exits; run its check by hand so the
		// directory is removed first.
		code = m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}
	}()
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// sluiceBin builds the command once per test binary.
func sluiceBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "sluice")
	buildOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// TestUsage: every command-line error names the flag or the source of
// the node file's name, and exits 2.
func TestUsage(t *testing.T) {
	dir := t.TempDir()
	good := srcstest.WriteFile(t, dir, "node.yaml", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n")
	for _, tc := range []struct {
		name string
		args []string
		env  string // SLUICE_CONFIG
		code int
		want string // in stderr, or stdout for code 0
	}{
		{"no command", nil, "", exitUsage, "usage: sluice <command>"},
		{"unknown command", []string{"start"}, "", exitUsage, `sluice: unknown command "start"`},
		{"unknown flag", []string{"run", "--config-file", "x"}, "", exitUsage, "sluice run: flag provided but not defined: -config-file"},
		{"flag without value", []string{"check", "-c"}, "", exitUsage, "sluice check: flag needs an argument: -c"},
		{"bad bool", []string{"run", "--pprof=maybe"}, "", exitUsage, `invalid boolean value "maybe" for -pprof`},
		{"stray argument", []string{"check", good}, "", exitUsage, "the node file goes after -c"},
		{"missing file", []string{"check", "-c", filepath.Join(dir, "nope.yaml")}, "", exitUsage, "sluice check: -c: " + dir + "/nope.yaml: no such file"},
		{"missing from env", []string{"check"}, filepath.Join(dir, "env.yaml"), exitUsage, "SLUICE_CONFIG: " + dir + "/env.yaml: no such file"},
		{"pprof without endpoint", []string{"run", "-c", good, "--pprof"}, "", exitUsage, "--pprof: needs --metrics or metrics.listen"},
		{"bad file", []string{"check", "-c", srcstest.WriteFile(t, dir, "bad.yaml", "engine:\n  flush: soon\n")}, "", exitUsage, "bad.yaml:2: engine.flush: \"soon\" is not a duration"},
		{"check", []string{"check", "-c", good}, "", exitOK, "buf_size: 65536"},
		{"check from env", []string{"check"}, good, exitOK, "listen: 127.0.0.1:0"},
		{"version", []string{"version"}, "", exitOK, "sluice "},
		{"help", []string{"run", "--help"}, "", exitOK, "-metrics ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLUICE_CONFIG", tc.env)
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			got := stderr.String()
			if tc.code == exitOK {
				got = stdout.String()
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Fatalf("exit %d, want %d; output:\n%s%s\nwant it to contain %q", code, tc.code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"probe"}, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "auto picks: ") ||
		!strings.Contains(stdout.String(), "goroutine  available") {
		t.Fatalf("exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}
}

// proc is a sluice process whose standard error the test reads line by
// line.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	log   []string
	exit  chan error
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	p := &proc{t: t, cmd: exec.CommandContext(ctx, sluiceBin(t), args...), lines: make(chan string, 256), exit: make(chan error, 1)}
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
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.exit <- p.cmd.Wait()
	}()
	return p
}

// await reads the log until a line contains s.
func (p *proc) await(s string) string {
	p.t.Helper()
	for line := range p.lines {
		p.log = append(p.log, line)
		if strings.Contains(line, s) {
			return line
		}
	}
	p.t.Fatalf("exited before %q:\n%s", s, strings.Join(p.log, "\n"))
	return ""
}

// wait reads the log to its end and returns the exit status.
func (p *proc) wait() int {
	p.t.Helper()
	for line := range p.lines {
		p.log = append(p.log, line)
	}
	err := <-p.exit
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	p.t.Fatal(err)
	return -1
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) all() string { return strings.Join(p.log, "\n") }

// field returns the value of key=value in a text log line.
func field(line, key string) string {
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, " ")
	return strings.Trim(v, `"`)
}

// TestDoubleSIGTERM: SIGTERM twice within 10ms, as `timeout` or a
// process manager signalling the whole group delivers it, is one request
// to stop: the drain completes, the tail's checkpoint is saved, and the
// node exits 0.
func TestDoubleSIGTERM(t *testing.T) {
	dir := t.TempDir()
	body := strings.Repeat("a line\n", 5000)
	logf := srcstest.WriteFile(t, dir, "app.log", body)
	cfg := srcstest.WriteFile(t, dir, "node.yaml", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n"+
		"  - tail: {path: "+logf+", checkpoint: "+logf+".ckpt, from_start: true}\n    framing: newline\n"+
		"metrics: {listen: 127.0.0.1:0}\n")
	for run := range 3 {
		os.Remove(logf + ".ckpt") // each run reads the file from its start
		p := start(t, "run", "-c", cfg)
		ready := p.await(`msg="node ready"`)
		metrics := field(ready, "metrics")
		until(t, func() bool { return scrape(t, metrics, "sluice_bytes_received_total") >= float64(len(body)) })
		p.signal(syscall.SIGTERM)
		time.Sleep(time.Duration(run) * 5 * time.Millisecond) // 0, 5 and 10ms apart
		// A short drain may be over already, as with `timeout`.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatal(err)
		}
		if code := p.wait(); code != 0 || !strings.Contains(p.all(), "msg=drained") {
			t.Fatalf("run %d: exit %d:\n%s", run, code, p.all())
		}
		ck, err := os.ReadFile(logf + ".ckpt")
		if err != nil || !strings.Contains(string(ck), fmt.Sprintf(`"offset":%d`, len(body))) {
			t.Fatalf("run %d: checkpoint %s %v", run, ck, err)
		}
	}
}

// TestSecondSignalForces: while the drain cannot finish (JetStream is
// gone, chunks wait for their acknowledgements), the same SIGTERM again
// at once is ignored, and SIGINT after it ends the process with status 1.
func TestSecondSignalForces(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	}
	defer stop()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	cfg := srcstest.WriteFile(t, t.TempDir(), "node.yaml", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n"+
		"output:\n  jetstream: {url: "+ns.ClientURL()+", subject: ingest.raw, stream: INGEST}\n"+
		"metrics: {listen: 127.0.0.1:0}\n")
	p := start(t, "run", "-c", cfg)
	ready := p.await(`msg="node ready"`)
	metrics, addr := field(ready, "metrics"), strings.TrimPrefix(field(ready, "listening"), "tcp://")
	stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Repeat("s", 10000))); err != nil {
		t.Fatal(err)
	}
	until(t, func() bool { return scrape(t, metrics, "sluice_chunks_delivered_total") >= 1 })
	p.signal(syscall.SIGTERM)
	p.await("msg=draining")
	p.signal(syscall.SIGTERM)
	p.await(`msg="signal ignored: the drain goes on"`)
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 1 || !strings.Contains(p.all(), "SIGINT after SIGTERM") || strings.Contains(p.all(), "msg=drained") {
		t.Fatalf("exit %d:\n%s", code, p.all())
	}
}

// TestSourceFailedExitStatus: a source that failed while the node ran
// makes the drained node exit 3, naming it.
func TestSourceFailedExitStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial is refused
	cfg := srcstest.WriteFile(t, t.TempDir(), "node.yaml", "sources:\n  - tcp_client:\n      addr: "+addr+
		"\n      backoff: {initial: 10ms, max: 10ms, attempts: 2}\n")
	p := start(t, "run", "-c", cfg)
	p.await(`msg="source failed"`)
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != exitSourcesFailed || !strings.Contains(p.all(), "1 of 1 sources failed (tcp_client "+addr) {
		t.Fatalf("exit %d:\n%s", code, p.all())
	}
}

// TestStartupFailure: a tail of a missing file stops the node before it
// is ready, with status 1 and the source named.
func TestStartupFailure(t *testing.T) {
	dir := t.TempDir()
	cfg := srcstest.WriteFile(t, dir, "node.yaml", "sources:\n  - tail: {path: "+dir+"/missing.log}\n")
	p := start(t, "run", "-c", cfg)
	if code := p.wait(); code != exitFailure || !strings.Contains(p.all(), "sources[0] (tail "+dir+"/missing.log)") ||
		strings.Contains(p.all(), "node ready") {
		t.Fatalf("exit %d:\n%s", code, p.all())
	}
}

func until(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scrape returns an unlabelled sample's value from a metrics URL, or -1.
func scrape(t *testing.T, url, name string) float64 {
	t.Helper()
	if v, ok := srcstest.Scrape(t, url, name); ok {
		return v
	}
	return -1
}

// TestUnderTimeout: `timeout` signals the node and then its own process
// group, so the node gets SIGTERM twice at once: it drains and exits 0.
func TestUnderTimeout(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout(1)")
	}
	cfg := srcstest.WriteFile(t, t.TempDir(), "node.yaml", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n")
	out, err := exec.Command("timeout", "--preserve-status", "1", sluiceBin(t), "run", "-c", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "msg=drained") || strings.Contains(string(out), "second signal") {
		t.Fatalf("%v:\n%s", err, out)
	}
}

// TestJSONLogEveryLine: with log: {format: json}, every line on standard
// error is a JSON object, a start-up failure's reason included, and
// durations read as the node file writes them.
func TestJSONLogEveryLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		body     string
		exit     int
		want     []string // in some line
		drainNow bool     // send SIGTERM once ready
	}{
		{"start-up failure", "sources:\n  - tail: {path: " + dir + "/missing.log}\nlog: {format: json}\n", exitFailure,
			[]string{`"msg":"cannot start"`, `missing.log`}, false},
		{"pprof without an endpoint", "sources:\n  - tcp: {listen: 127.0.0.1:0}\nlog: {format: json}\nmetrics: {pprof: true}\n", exitFailure,
			[]string{`"msg":"cannot start"`, `metrics.pprof needs an endpoint`}, false},
		{"drain", "sources:\n  - tcp: {listen: 127.0.0.1:0}\nlog: {format: json}\ndrain_timeout: 7s\n", exitOK,
			[]string{`"msg":"node ready"`, `"timeout":"7s"`, `"msg":"drained"`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := srcstest.WriteFile(t, t.TempDir(), "node.yaml", tc.body)
			p := start(t, "run", "-c", cfg)
			if tc.drainNow {
				p.await(`"node ready"`)
				p.signal(syscall.SIGTERM)
			}
			if code := p.wait(); code != tc.exit {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.exit, p.all())
			}
			for _, line := range p.log {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Errorf("not a JSON line: %q", line)
				}
				for k, v := range m {
					if f, ok := v.(float64); ok && f >= 1e6 && k != "bytes" && k != "pid" {
						t.Errorf("%s: %v looks like a duration in nanoseconds: %s", k, f, line)
					}
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(p.all(), w) {
					t.Errorf("no line has %s:\n%s", w, p.all())
				}
			}
		})
	}
}
