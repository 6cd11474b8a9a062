package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNodeConfigErrors: unknown keys and bad values are errors naming the
// key and its line.
func TestNodeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown top key", "engine: {}\nsorces: []\n", "line 2: field sorces not found"},
		{"unknown engine key", "engine:\n  bufers: 10\n", "line 2: field bufers not found in type engine.Config"},
		{"wrong type", "engine:\n  buffers: many\n", "line 2: cannot unmarshal !!str `many` into int"},
		{"bad duration", "engine:\n  flush: soon\n", "line 2: cannot unmarshal !!str `soon` into time.Duration"},
		{"engine value", "engine:\n  runner: fast\nsources:\n  - tcp: {listen: 127.0.0.1:0}\n", "node.yaml:2: engine.runner: fast: must be auto"},
		{"engine watermark", "engine:\n  buffers: 8\n  queue_low: 9\n  queue_high: 4\nsources:\n  - tcp: {listen: 127.0.0.1:0}\n", "node.yaml:3: engine.queue_low: 9: must be below QueueHigh"},
		{"no sources", "engine: {}\n", "sources: the node needs at least one source"},
		{"two kinds", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n  - file: {path: /x}\n    tail: {path: /y}\n", "node.yaml:3: sources[1]: names several kinds (file, tail)"},
		{"no kind", "sources:\n  - flush: 1s\n", "node.yaml:2: sources[0]: names no kind"},
		{"missing listen", "sources:\n  - tcp:\n      max_conns: 3\n", "node.yaml:2: sources[0].tcp.listen: required"},
		{"unknown source key", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      reuseport: true\n", "line 4: field reuseport not found"},
		{"negative cap", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      max_conns: -1\n", "node.yaml:4: sources[0].tcp.max_conns: must not be negative"},
		{"negative receive buffer", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      recv_buffer: -1\n", "node.yaml:4: sources[0].tcp.recv_buffer: -1: must not be negative"},
		{"unix receive buffer", "sources:\n  - unix:\n      listen: /tmp/x.sock\n      recv_buffer: 65536\n", "node.yaml:4: sources[0].unix.recv_buffer: applies to tcp listeners only"},
		{"bad framing", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n    framing: lines\n", "node.yaml:4: sources[0].framing: framing \"lines\": unknown"},
		{"framed udp", "sources:\n  - udp:\n      addr: 127.0.0.1:0\n    framing: newline\n", "node.yaml:4: sources[0].framing: \"newline\": udp sources cannot be framed"},
		{"mqtt topics", "sources:\n  - mqtt:\n      broker: 127.0.0.1:1883\n", "node.yaml:2: sources[0].mqtt.topics: required"},
		{"jetstream subject", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    url: nats://127.0.0.1:1\n", "node.yaml:4: output.jetstream.subject: required"},
		{"jetstream key", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subjct: x\n", "line 5: field subjct not found in type jetstream.Config"},
		{"syntax", "engine: [\n", "node.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadNodeConfig(writeFile(t, dir, "node.yaml", tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "bench: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// exampleConfig returns examples/<name> with its fixed ports made free
// ones and /tmp/sluice-node moved to dir.
func exampleConfig(t *testing.T, name, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "/tmp/sluice-node", dir)
	s = regexp.MustCompile(`127\.0\.0\.1:94\d\d`).ReplaceAllString(s, "127.0.0.1:0")
	if _, err := LoadNodeConfig(filepath.Join("..", "examples", name)); err != nil {
		t.Fatalf("the example as shipped: %v", err)
	}
	return writeFile(t, dir, name, s)
}

// scrapeValue fetches url and returns the value of an unlabelled sample.
func scrapeValue(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s not in the scrape", name)
	return 0
}

// TestNodeExample runs examples/node.yaml in the sluice-bench binary:
// data sent to its TCP listener and written to its tailed file shows in
// /metrics; SIGINT drains, saves the tail's checkpoint and exits 0.
func TestNodeExample(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	logBody := strings.Repeat("a log line\n", 1000)
	writeFile(t, dir, "app.log", logBody)
	cfg := exampleConfig(t, "node.yaml", dir)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "sink", "--config", cfg, "--metrics", "127.0.0.1:0", "--pprof")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var tcpAddr, metricsURL string
	var log []string
	for metricsURL == "" {
		line, ok := <-lines
		if !ok {
			t.Fatalf("node exited before it was ready:\n%s", strings.Join(log, "\n"))
		}
		log = append(log, line)
		if a, ok := strings.CutPrefix(line, "sluice-bench sink: listening on tcp://"); ok {
			tcpAddr = a
		}
		if u, ok := strings.CutPrefix(line, "sluice-bench sink: metrics on "); ok {
			metricsURL = u
		}
	}
	if tcpAddr == "" {
		t.Fatalf("no tcp listener announced:\n%s", strings.Join(log, "\n"))
	}
	const tcpBytes = 300_000
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(strings.Repeat("t", tcpBytes))); err != nil {
		t.Fatal(err)
	}
	c.Close()
	want := float64(tcpBytes + len(logBody))
	// Another process: poll its metrics, the only view it offers.
	for tick := time.NewTicker(20 * time.Millisecond); scrapeValue(t, metricsURL, "sluice_bytes_received_total") < want; {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("bytes received never reached %v", want)
		}
	}
	if resp, err := http.Get(strings.TrimSuffix(metricsURL, "metrics") + "debug/pprof/"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("pprof: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for line := range lines {
		log = append(log, line)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node after SIGINT: %v\n%s", err, strings.Join(log, "\n"))
	}
	all := strings.Join(log, "\n")
	if !strings.Contains(all, "sluice-bench sink: drained:") {
		t.Errorf("no drain reported:\n%s", all)
	}
	ck, err := os.ReadFile(filepath.Join(dir, "app.log.ckpt"))
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, all)
	}
	var pos struct{ Offset int64 }
	if err := json.Unmarshal(ck, &pos); err != nil || pos.Offset != int64(len(logBody)) {
		t.Fatalf("checkpoint %s (%v), want offset %d", ck, err, len(logBody))
	}
}

// lineChan is an io.Writer that hands each complete line to a channel.
type lineChan struct {
	ch  chan string
	mu  sync.Mutex
	buf []byte
}

func (w *lineChan) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.ch <- string(w.buf[:i]):
		default: // nobody listens any more
		}
		w.buf = w.buf[i+1:]
	}
}

// TestNodeJetStream runs examples/node-jetstream.yaml against an embedded
// NATS server: bytes sent to the node end up in the stream, all of them
// before the drain returns.
func TestNodeJetStream(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	dir := t.TempDir()
	cfg := exampleConfig(t, "node-jetstream.yaml", dir)
	b, _ := os.ReadFile(cfg)
	writeFile(t, dir, "node-jetstream.yaml", strings.ReplaceAll(string(b), "nats://127.0.0.1:4222", ns.ClientURL()))

	// Buffers larger than the server takes could never be published.
	big := writeFile(t, dir, "big.yaml", strings.Replace(
		strings.ReplaceAll(string(b), "nats://127.0.0.1:4222", ns.ClientURL()), "buffers: 512", "buffers: 4\n  buf_size: 4194304", 1))
	if _, err := RunNode(context.Background(), NodeFlags{Config: big}, IO{Out: io.Discard, Err: io.Discard}); err == nil ||
		!strings.Contains(err.Error(), "engine.buf_size: 4194304: above the NATS server's max_payload") {
		t.Fatalf("buffers above max_payload: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineChan{ch: make(chan string, 64)}
	type result struct {
		rep *NodeReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := RunNode(ctx, NodeFlags{Config: cfg}, IO{Out: io.Discard, Err: out})
		done <- result{rep, err}
	}()
	var addr string
	for addr == "" {
		select {
		case line := <-out.ch:
			if a, ok := strings.CutPrefix(line, "sluice-bench sink: listening on tcp://"); ok {
				addr = a
			}
		case r := <-done:
			t.Fatalf("node ended: %v", r.err)
		}
	}
	const conns, per = 4, 100_000
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(strings.Repeat("j", per))); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// Wait until the stream holds everything, through a consumer of our own.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	var stream njs.Stream
	for stream == nil {
		if stream, err = js.Stream(sctx, "INGEST"); err != nil {
			stream = nil
			select {
			case <-sctx.Done():
				t.Fatal(err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	cons, err := stream.OrderedConsumer(sctx, njs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < conns*per {
		m, err := cons.Next(njs.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		got += len(m.Data())
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.rep.Bytes != conns*per || r.rep.Published != r.rep.Delivered || got != conns*per {
		t.Fatalf("node report %+v; stream held %d bytes", r.rep, got)
	}
}

// TestNodeSecondSignalForces: with JetStream gone, the drain cannot
// finish (chunks wait for their acks); a second SIGINT ends the process
// at once with status 1.
func TestNodeSecondSignalForces(t *testing.T) {
	bin := buildCLI(t)
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
	dir := t.TempDir()
	cfg := exampleConfig(t, "node-jetstream.yaml", dir)
	b, _ := os.ReadFile(cfg)
	writeFile(t, dir, "node-jetstream.yaml", strings.ReplaceAll(string(b), "nats://127.0.0.1:4222", ns.ClientURL()))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "sink", "--config", cfg, "--metrics", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log []string
	await := func(prefix string) string {
		t.Helper()
		for {
			line, ok := <-lines
			if !ok {
				t.Fatalf("node exited before %q:\n%s", prefix, strings.Join(log, "\n"))
			}
			log = append(log, line)
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return rest
			}
		}
	}
	addr := await("sluice-bench sink: listening on tcp://")
	metricsURL := await("sluice-bench sink: metrics on ")
	if v := scrapeValue(t, metricsURL, "sluice_jetstream_acked_total"); v != 0 {
		t.Fatalf("acked before any data: %v", v)
	}
	stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Repeat("s", 10000))); err != nil {
		t.Fatal(err)
	}
	for tick := time.NewTicker(20 * time.Millisecond); scrapeValue(t, metricsURL, "sluice_chunks_delivered_total") < 1; {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("no chunk reached the output")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	await("sluice-bench sink: draining")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for line := range lines {
		log = append(log, line)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("node after two signals: %v, want exit status 1\n%s", err, strings.Join(log, "\n"))
	}
	if all := strings.Join(log, "\n"); !strings.Contains(all, "second signal") || strings.Contains(all, "drained:") {
		t.Fatalf("output:\n%s", all)
	}
}

// TestNodeFileAndClientSources runs a node whose sources are a file and a
// TCP client: both deliver every byte, and the drain reports them.
func TestNodeFileAndClientSources(t *testing.T) {
	dir := t.TempDir()
	const fileBytes, peerBytes = 100_000, 50_000
	file := writeFile(t, dir, "data.bin", strings.Repeat("f", fileBytes))
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
	cfg := writeFile(t, dir, "node.yaml", "engine:\n  buffers: 32\nsources:\n"+
		"  - file:\n      path: "+file+"\n"+
		"  - tcp_client:\n      addr: "+peer.Addr().String()+"\n      backoff: {initial: 1s}\n")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineChan{ch: make(chan string, 64)}
	type result struct {
		rep *NodeReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := RunNode(ctx, NodeFlags{Config: cfg, Metrics: "127.0.0.1:0"}, IO{Out: io.Discard, Err: out})
		done <- result{rep, err}
	}()
	var url string
	for url == "" {
		select {
		case line := <-out.ch:
			if u, ok := strings.CutPrefix(line, "sluice-bench sink: metrics on "); ok {
				url = u
			}
		case r := <-done:
			t.Fatalf("node ended: %v", r.err)
		}
	}
	<-served
	deadline := time.After(30 * time.Second)
	for tick := time.NewTicker(10 * time.Millisecond); scrapeValue(t, url, "sluice_bytes_received_total") < fileBytes+peerBytes; {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("bytes never arrived")
		}
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.rep.Bytes != fileBytes+peerBytes {
		t.Fatalf("node report: %+v", r.rep)
	}
}
