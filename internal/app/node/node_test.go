package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// testNode is a node running in the test's process, with a signal
// channel of the test's.
type testNode struct {
	t      *testing.T
	n      *Node
	path   string
	sigs   chan os.Signal
	log    *srcstest.LockedBuffer
	stdout *srcstest.LockedBuffer
	done   chan result
	ended  *result
}

type result struct {
	rep *Report
	err error
}

// newTestNode writes body as a node file and opens it, with its metrics
// endpoint on a free port.
func newTestNode(t *testing.T, body string) (*testNode, error) {
	t.Helper()
	path := srcstest.WriteFile(t, t.TempDir(), "node.yaml", body)
	return openTestNode(t, path)
}

func openTestNode(t *testing.T, path string) (*testNode, error) {
	t.Helper()
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	tn := &testNode{t: t, path: path, sigs: make(chan os.Signal, 4), log: &srcstest.LockedBuffer{}, stdout: &srcstest.LockedBuffer{}, done: make(chan result, 1)}
	tn.n, err = New(cfg, WithConfigPath(path), WithLogOutput(tn.log), WithStdout(tn.stdout), WithMetrics("127.0.0.1:0", false))
	if err != nil {
		return nil, err
	}
	go func() {
		rep, err := tn.n.Run(context.Background(), tn.sigs)
		tn.done <- result{rep, err}
	}()
	t.Cleanup(func() {
		if tn.ended == nil {
			tn.stop()
		}
	})
	return tn, nil
}

// startNode is newTestNode that fails the test on an error.
func startNode(t *testing.T, body string) *testNode {
	t.Helper()
	tn, err := newTestNode(t, body)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// stop sends SIGTERM and waits for the drain.
func (tn *testNode) stop() (*Report, error) {
	tn.t.Helper()
	tn.sigs <- syscall.SIGTERM
	return tn.wait()
}

func (tn *testNode) wait() (*Report, error) {
	tn.t.Helper()
	select {
	case r := <-tn.done:
		tn.ended = &r
		return r.rep, r.err
	case <-time.After(60 * time.Second):
		tn.t.Fatalf("the node did not drain:\n%s", tn.log)
		return nil, nil
	}
}

func (tn *testNode) metricsURL() string { return "http://" + tn.n.MetricsAddr() + "/metrics" }

func (tn *testNode) addr(kind string) string {
	tn.t.Helper()
	for _, a := range tn.n.Addrs() {
		if rest, ok := strings.CutPrefix(a, kind+"://"); ok {
			return rest
		}
	}
	tn.t.Fatalf("no %s listener in %v", kind, tn.n.Addrs())
	return ""
}

// until polls cond every 10ms for up to 30s: the node's state is seen
// through its endpoints, as an operator would.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in time", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func scrapeValue(t *testing.T, url, sample string) float64 {
	t.Helper()
	v, ok := srcstest.Scrape(t, url, sample)
	if !ok {
		t.Fatalf("%s not in the scrape", sample)
	}
	return v
}

func health(t *testing.T, tn *testNode) (int, Health) {
	t.Helper()
	resp, err := http.Get("http://" + tn.n.MetricsAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, h
}

// exampleConfig returns examples/<name> with its fixed ports made free
// ones and /tmp/sluice-node moved to dir.
func exampleConfig(t *testing.T, name, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "/tmp/sluice-node", dir)
	s = regexp.MustCompile(`127\.0\.0\.1:94\d\d`).ReplaceAllString(s, "127.0.0.1:0")
	if _, err := Load(filepath.Join("..", "..", "..", "examples", name)); err != nil {
		t.Fatalf("the example as shipped: %v", err)
	}
	return srcstest.WriteFile(t, dir, name, s)
}

// TestNodeExample runs examples/node.yaml: data sent to its TCP listener
// and written to its tailed file shows in /metrics; SIGTERM drains and
// saves the tail's checkpoint.
func TestNodeExample(t *testing.T) {
	dir := t.TempDir()
	logBody := strings.Repeat("a log line\n", 1000)
	srcstest.WriteFile(t, dir, "app.log", logBody)
	tn, err := openTestNode(t, exampleConfig(t, "node.yaml", dir))
	if err != nil {
		t.Fatal(err)
	}
	const tcpBytes = 300_000
	c, err := net.Dial("tcp", tn.addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(strings.Repeat("t", tcpBytes))); err != nil {
		t.Fatal(err)
	}
	c.Close()
	want := float64(tcpBytes + len(logBody))
	until(t, "bytes", func() bool { return scrapeValue(t, tn.metricsURL(), "sluice_bytes_received_total") >= want })
	if code, h := health(t, tn); code != 200 || h.Status != "ok" {
		t.Fatalf("healthz: %d %+v", code, h)
	}
	if _, err := tn.stop(); err != nil {
		t.Fatalf("%v\n%s", err, tn.log)
	}
	if !strings.Contains(tn.log.String(), "msg=drained") {
		t.Errorf("no drain logged:\n%s", tn.log)
	}
	ck, err := os.ReadFile(filepath.Join(dir, "app.log.ckpt"))
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, tn.log)
	}
	var pos struct{ Offset int64 }
	if err := json.Unmarshal(ck, &pos); err != nil || pos.Offset != int64(len(logBody)) {
		t.Fatalf("checkpoint %s (%v), want offset %d", ck, err, len(logBody))
	}
}

func startNATS(t *testing.T) *server.Server {
	t.Helper()
	return startNATSWith(t, &server.Options{})
}

// startNATSWith starts an embedded JetStream server on loopback with opts
// (its listener, store and logging fields are set here), stopped at the
// test's end.
func startNATSWith(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, t.TempDir(), true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	return ns
}

// TestNodeJetStream runs examples/node-jetstream.yaml against an embedded
// NATS server: bytes sent to the node end up in the stream, all of them
// before the drain returns.
func TestNodeJetStream(t *testing.T) {
	ns := startNATS(t)
	dir := t.TempDir()
	cfg := exampleConfig(t, "node-jetstream.yaml", dir)
	b, _ := os.ReadFile(cfg)
	body := strings.ReplaceAll(string(b), "nats://127.0.0.1:4222", ns.ClientURL())

	// Buffers larger than the server takes could never be published.
	_, err := newTestNode(t, strings.Replace(body, "buffers: 512", "buffers: 4\n  buf_size: 4194304", 1))
	if err == nil || !strings.Contains(err.Error(), "engine.buf_size: 4194304: above the NATS server's max_payload") {
		t.Fatalf("buffers above max_payload: %v", err)
	}

	tn := startNode(t, body)
	const conns, per = 4, 100_000
	for range conns {
		c, err := net.Dial("tcp", tn.addr("tcp"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(strings.Repeat("j", per))); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := readIngest(t, nc, conns*per)
	rep, err := tn.stop()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bytes != conns*per || rep.Published != rep.Delivered || got != conns*per {
		t.Fatalf("node report %+v; stream held %d bytes", rep, got)
	}
}

// TestNodeFileAndClientSources runs a node whose sources are a file and a
// TCP client: both deliver every byte, and the drain reports them.
func TestNodeFileAndClientSources(t *testing.T) {
	dir := t.TempDir()
	const fileBytes, peerBytes = 100_000, 50_000
	file := srcstest.WriteFile(t, dir, "data.bin", strings.Repeat("f", fileBytes))
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := peer.Accept()
		peer.Close() // one session only: redials then fail and back off
		if err != nil {
			return
		}
		c.Write([]byte(strings.Repeat("p", peerBytes)))
		c.Close()
	}()
	tn := startNode(t, "engine:\n  buffers: 32\nsources:\n"+
		"  - file:\n      path: "+file+"\n"+
		"  - tcp_client:\n      addr: "+peer.Addr().String()+"\n      backoff: {initial: 1s}\n")
	<-served
	until(t, "bytes", func() bool {
		return scrapeValue(t, tn.metricsURL(), "sluice_bytes_received_total") >= fileBytes+peerBytes
	})
	rep, err := tn.stop()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bytes != fileBytes+peerBytes {
		t.Fatalf("node report: %+v", rep)
	}
}

// TestNodeMissingTail: a tail of a missing file fails the node at
// start-up, with the path and the way out; with wait_for_file the node
// starts, says once that it waits, and follows the file from its start
// when it appears.
func TestNodeMissingTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "late.log")
	_, err := newTestNode(t, "sources:\n  - tail:\n      path: "+path+"\n")
	if err == nil || !strings.Contains(err.Error(), "sources[0] (tail "+path+")") ||
		!strings.Contains(err.Error(), "no such file") || !strings.Contains(err.Error(), "wait_for_file: true") {
		t.Fatalf("a missing tail: %v", err)
	}

	tn := startNode(t, "sources:\n  - tail:\n      path: "+path+"\n      poll: 10ms\n      wait_for_file: true\n    framing: newline\n"+
		"output:\n  stdout: {}\n")
	if code, h := health(t, tn); code != 200 || h.Status != "starting" || h.Sources[0].State != "waiting" {
		t.Fatalf("healthz while waiting: %d %+v", code, h)
	}
	srcstest.WriteFile(t, dir, "late.log", "first\nsecond\n")
	until(t, "the lines on stdout", func() bool { return tn.stdout.String() == "first\nsecond\n" })
	if code, h := health(t, tn); code != 200 || h.Status != "ok" || h.Sources[0].State != "running" {
		t.Fatalf("healthz once following: %d %+v", code, h)
	}
	if _, err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(tn.log.String(), "waiting for the file"); n != 1 {
		t.Fatalf("said %d times that it waits:\n%s", n, tn.log)
	}
}

// TestNodeUnwritableCheckpoint: a tail whose checkpoint cannot be written
// fails the node at start-up, naming the checkpoint.
func TestNodeUnwritableCheckpoint(t *testing.T) {
	dir := t.TempDir()
	logf := srcstest.WriteFile(t, dir, "app.log", "x\n")
	notDir := srcstest.WriteFile(t, dir, "plain", "")
	missing := filepath.Join(dir, "no", "such", "dir")
	cases := map[string]struct{ ck, want string }{
		"missing directory": {filepath.Join(missing, "app.ckpt"), "its directory " + missing + " does not exist"},
		"parent is a file":  {filepath.Join(notDir, "app.ckpt"), notDir + " is not a directory"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		cases["read-only directory"] = struct{ ck, want string }{filepath.Join(ro, "app.ckpt"), "its directory " + ro + " is not writable: permission denied"}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := newTestNode(t, "sources:\n  - tail:\n      path: "+logf+"\n      checkpoint: "+tc.ck+"\n")
			if err == nil || !strings.HasSuffix(err.Error(), "checkpoint "+tc.ck+": "+tc.want) || strings.Contains(err.Error(), ".sluice-check") {
				t.Fatalf("error %v\nwant it to end %q", err, "checkpoint "+tc.ck+": "+tc.want)
			}
		})
	}
}

// TestNodeSourceFailsAtRunTime: a source that dies while the node runs
// (a TCP client out of attempts) shows as failed in /metrics and
// /healthz, and the drain's error says so.
func TestNodeSourceFailsAtRunTime(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := peer.Accept()
		peer.Close()
		if err == nil {
			c.(*net.TCPConn).SetLinger(0)
			c.Close() // a reset
		}
	}()
	tn := startNode(t, "sources:\n  - tcp_client:\n      addr: "+peer.Addr().String()+
		"\n      backoff: {initial: 10ms, max: 10ms, attempts: 2}\n")
	until(t, "a failed source", func() bool {
		v, _ := srcstest.Scrape(t, tn.metricsURL(), `sluice_sources{state="failed"}`)
		return v == 1
	})
	code, h := health(t, tn)
	if code != 503 || h.Status != "failed" || h.Sources[0].State != "failed" || h.Sources[0].Err == "" {
		t.Fatalf("healthz: %d %+v", code, h)
	}
	_, err = tn.stop()
	if !errors.Is(err, ErrSourcesFailed) || !strings.Contains(err.Error(), "tcp_client "+peer.Addr().String()) {
		t.Fatalf("drain: %v", err)
	}
}

// TestNodeOutputs: the file output in chunks format writes a header line
// per chunk, the bytes, and a newline; records format writes datagrams
// one per line.
func TestNodeOutputs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	tn := startNode(t, "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    framing: newline\n"+
		"output:\n  file: {path: "+out+", format: chunks}\n")
	c, err := net.Dial("tcp", tn.addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("one\ntwo\n"))
	c.Close()
	// The connection ends by itself; a drain before that would stop it
	// with its bytes unread.
	until(t, "the end of the connection", func() bool {
		b, _ := os.ReadFile(out)
		return bytes.Contains(b, []byte("state=closed"))
	})
	if _, err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	re := regexp.MustCompile(`^sluice-chunk source=(\d+) seq=0 bytes=8 flags=\S*records\S* name="tcp://127\.0\.0\.1:\d+"\none\ntwo\n\n` +
		`sluice-chunk source=(\d+) seq=1 bytes=0 flags=eos name="tcp://127\.0\.0\.1:\d+" state=closed\n\n$`)
	if !re.Match(b) {
		t.Fatalf("file output:\n%s", b)
	}

	tn = startNode(t, "sources:\n  - udp: {addr: 127.0.0.1:0}\noutput:\n  stdout: {format: records}\n")
	u, err := net.Dial("udp", tn.addr("udp"))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Write([]byte("alpha"))
	u.Write([]byte("beta"))
	until(t, "datagrams", func() bool { return tn.stdout.String() == "alpha\nbeta\n" })
}

// TestNodeDoubleSignal: the same signal twice at once is one request to
// stop: the drain completes. (cmd/sluice tests it with real signals.)
func TestNodeDoubleSignal(t *testing.T) {
	tn := startNode(t, "sources:\n  - tcp: {listen: 127.0.0.1:0}\n")
	tn.sigs <- syscall.SIGTERM
	tn.sigs <- syscall.SIGTERM
	if _, err := tn.wait(); err != nil {
		t.Fatalf("%v\n%s", err, tn.log)
	}
}

// TestNodeContextThenSignal: a program that ends Run's context on SIGINT
// (signal.NotifyContext, as sluice-bench does) and also hands the node
// its signals sees the one SIGINT on both; when the context wins the
// race, the signal that follows is the same request, and the drain
// completes.
func TestNodeContextThenSignal(t *testing.T) {
	cfg, err := Load(srcstest.WriteFile(t, t.TempDir(), "node.yaml", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	log := &srcstest.LockedBuffer{}
	n, err := New(cfg, WithLogOutput(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sigs := make(chan os.Signal, 1)
	sigs <- os.Interrupt
	if _, err := n.Run(ctx, sigs); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
}

func TestSignalPolicy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		first    os.Signal
		terminal bool
		sig      os.Signal
		after    time.Duration
		force    bool
	}{
		{"SIGTERM twice at once", syscall.SIGTERM, false, syscall.SIGTERM, 2 * time.Millisecond, false},
		{"SIGTERM twice, a second apart", syscall.SIGTERM, false, syscall.SIGTERM, time.Second, true},
		{"SIGINT after SIGTERM", syscall.SIGTERM, false, os.Interrupt, time.Millisecond, true},
		{"SIGINT twice at once, no terminal", os.Interrupt, false, os.Interrupt, time.Millisecond, false},
		{"SIGINT twice from a terminal", os.Interrupt, true, os.Interrupt, 300 * time.Millisecond, true},
		{"SIGTERM after SIGINT at once", os.Interrupt, true, syscall.SIGTERM, time.Millisecond, false},
		{"SIGHUP while draining", syscall.SIGTERM, false, syscall.SIGHUP, 5 * time.Second, false},
		// The context ended, on the same signal (signal.NotifyContext),
		// before the node saw it: one request to stop.
		{"SIGINT just after the context ended", nil, false, os.Interrupt, time.Millisecond, false},
		{"SIGINT just after the context ended, from a terminal", nil, true, os.Interrupt, time.Millisecond, false},
		{"SIGTERM a second after the context ended", nil, false, syscall.SIGTERM, time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newSignalPolicy(tc.first, t0, tc.terminal)
			if force, why := p.next(tc.sig, t0.Add(tc.after)); force != tc.force {
				t.Fatalf("force %v (%s), want %v", force, why, tc.force)
			}
		})
	}
}

// TestNodeReload: SIGHUP adds a source new to the file and stops one
// gone from it; a change elsewhere is reported, not applied.
func TestNodeReload(t *testing.T) {
	dir := t.TempDir()
	a := srcstest.WriteFile(t, dir, "a.bin", strings.Repeat("a", 1000))
	b := srcstest.WriteFile(t, dir, "b.bin", strings.Repeat("b", 2000))
	tn := startNode(t, "sources:\n  - tcp: {listen: 127.0.0.1:0}\n  - file: {path: "+a+"}\n")
	ln := tn.addr("tcp")
	until(t, "a.bin", func() bool { return tn.n.Engine().Totals().Bytes == 1000 })
	// A connection of the listener that never sends: the node knows it
	// from its accept, and stops it with its listener.
	idle, err := net.Dial("tcp", ln)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	until(t, "the idle connection", func() bool {
		return scrapeValue(t, tn.metricsURL(), `sluice_listener_connections{listener="127.0.0.1:0"}`) == 1
	})
	if err := os.WriteFile(tn.path, []byte("engine: {buffers: 64}\nsources:\n  - file: {path: "+a+"}\n  - file: {path: "+b+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tn.sigs <- syscall.SIGHUP
	until(t, "b.bin", func() bool { return tn.n.Engine().Totals().Bytes == 3000 })
	until(t, "the listener closed", func() bool {
		c, err := net.Dial("tcp", ln)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	idle.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the idle connection of the stopped listener: read %d, %v; want EOF", n, err)
	}
	if _, err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	log := tn.log.String()
	if !strings.Contains(log, "sections=engine") || !strings.Contains(log, "added=1 stopped=1") {
		t.Fatalf("log:\n%s", log)
	}
}

// TestNodeJSONLogAndStatus: log.format json writes every line as JSON,
// and log.status adds status lines with the bytes and records.
func TestNodeJSONLogAndStatus(t *testing.T) {
	tn := startNode(t, "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    framing: newline\nlog: {format: json, status: 20ms}\n")
	c, err := net.Dial("tcp", tn.addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("a\nb\nc\n"))
	c.Close()
	until(t, "a status line with the records", func() bool { return strings.Contains(tn.log.String(), `"records":3,`) })
	if _, err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(tn.log.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] == nil {
			t.Fatalf("not a JSON log line: %q (%v)", line, err)
		}
	}
}

// readIngest reads the INGEST stream through an ordered consumer until
// it has want bytes, and returns how many it read.
func readIngest(t *testing.T, nc *nats.Conn, want int) int {
	t.Helper()
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stream njs.Stream
	var err error
	until(t, "stream", func() bool { stream, err = js.Stream(ctx, "INGEST"); return err == nil })
	cons, err := stream.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < want {
		m, err := cons.Next(njs.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		got += len(m.Data())
	}
	return got
}

// TestNodeStartErrors: what stops a node at start-up is said once, in the
// operator's terms: the entry, what failed and why, with no Go package
// prefixes and no layer repeating another.
func TestNodeStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyUDP.Close()
	dir := t.TempDir()
	taken, udpTaken := busy.Addr().String(), busyUDP.LocalAddr().String()
	for _, tc := range []struct{ name, body, want string }{
		{"tcp address in use", "sources:\n  - tcp: {listen: " + taken + "}\n",
			"sources[0] (tcp " + taken + "): cannot listen on " + taken + ": address already in use"},
		{"udp address in use", "sources:\n  - udp: {addr: " + udpTaken + "}\n",
			"sources[0] (udp " + udpTaken + "): cannot listen on " + udpTaken + ": address already in use"},
		{"unix socket in a missing directory", "sources:\n  - unix: {listen: " + dir + "/no/s.sock}\n",
			"sources[0] (unix " + dir + "/no/s.sock): cannot listen on " + dir + "/no/s.sock: no such file or directory"},
		{"metrics address in use", "sources:\n  - tcp: {listen: 127.0.0.1:0}\nmetrics: {listen: " + taken + "}\n",
			"metrics endpoint: cannot listen on " + taken + ": address already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := srcstest.WriteFile(t, t.TempDir(), "node.yaml", tc.body)
			cfg, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			n, err := New(cfg, WithConfigPath(path), WithLogOutput(io.Discard), WithStdout(io.Discard))
			if err == nil {
				n.close(context.Background())
				t.Fatal("the node started")
			}
			if err.Error() != tc.want {
				t.Fatalf("error\n\t%v\nwant\n\t%s", err, tc.want)
			}
		})
	}
}
