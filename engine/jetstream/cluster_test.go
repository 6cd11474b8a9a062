package jetstream_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/srcs"
)

// clusterNodeEnv, set in a child's environment, makes the test binary a
// JetStream cluster node instead of running tests (see TestMain).
const clusterNodeEnv = "SLUICE_JS_CLUSTER_NODE"

// runClusterNode runs one embedded nats-server of a test cluster, as the
// child process a test starts: its options come from the environment, it
// prints "ready" once it accepts clients, and it runs until its stdin
// ends or it is killed.
func runClusterNode() int {
	f := strings.Fields(os.Getenv(clusterNodeEnv)) // name client-port cluster-port store routes
	if len(f) != 5 {
		fmt.Fprintf(os.Stderr, "%s: want name, client port, cluster port, store and routes, got %q\n", clusterNodeEnv, f)
		return 2
	}
	port, _ := strconv.Atoi(f[1])
	cport, _ := strconv.Atoi(f[2])
	opts := &server.Options{ServerName: f[0], Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: f[3],
		NoLog: true, NoSigs: true}
	if f[4] != "-" { // "-": a server of its own
		opts.Cluster = server.ClusterOpts{Name: "sluice-test", Host: "127.0.0.1", Port: cport}
		opts.Routes = server.RoutesFromStr(f[4])
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		fmt.Fprintln(os.Stderr, "cluster node did not start")
		return 1
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	ns.Shutdown()
	ns.WaitForShutdown()
	return 0
}

// cluster is three nats-server processes forming a JetStream cluster on
// loopback. Each node is a child process, so that it can be killed with
// SIGKILL as a real server would die: no step-down, no flush, no goodbye
// to its routes.
type cluster struct {
	t     testing.TB
	size  int
	ports [3][2]int // client, cluster
	dirs  [3]string
	procs [3]*exec.Cmd
	stdin [3]io.WriteCloser
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startCluster(t testing.TB) *cluster { return startNodes(t, 3) }

// startNodes starts n nodes: 3 for a cluster, 1 for a server of its own.
func startNodes(t testing.TB, n int) *cluster {
	c := &cluster{t: t, size: n}
	for i := range n {
		c.ports[i] = [2]int{freePort(t), freePort(t)}
		c.dirs[i] = filepath.Join(t.TempDir(), "n"+strconv.Itoa(i))
	}
	// Registered after TempDir, so it runs before the directories go.
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
	})
	for i := range n {
		c.start(i)
	}
	return c
}

func (c *cluster) name(i int) string { return "n" + strconv.Itoa(i) }

func (c *cluster) url(i int) string { return "nats://127.0.0.1:" + strconv.Itoa(c.ports[i][0]) }

// urls lists every node, as a client's server list.
func (c *cluster) urls() string {
	return c.url(0) + "," + c.url(1) + "," + c.url(2)
}

// node returns the index of the node a client URL names, or -1.
func (c *cluster) node(url string) int {
	for i := range c.ports {
		if strings.HasSuffix(url, ":"+strconv.Itoa(c.ports[i][0])) {
			return i
		}
	}
	return -1
}

// start runs node i (again, on its ports and store) and waits until it
// accepts clients.
func (c *cluster) start(i int) {
	t := c.t
	t.Helper()
	routes := []string{"-"}
	if c.size > 1 {
		routes = nil
		for j := range c.size {
			if j != i {
				routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(c.ports[j][1]))
			}
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %s %s", clusterNodeEnv, c.name(i),
		c.ports[i][0], c.ports[i][1], c.dirs[i], strings.Join(routes, ",")))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.procs[i], c.stdin[i] = cmd, in
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("cluster node %s did not start: %q %v", c.name(i), line, err)
	}
}

// kill ends node i with SIGKILL and reaps it.
func (c *cluster) kill(i int) {
	if c.procs[i] == nil {
		return
	}
	c.procs[i].Process.Signal(syscall.SIGKILL)
	c.procs[i].Wait()
	c.stdin[i].Close()
	c.procs[i] = nil
}

// waitFor polls cond, which asks the cluster or the publisher something no
// channel can tell, until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		<-tick.C
	}
}

// record is one line a test client sends: its client number and its
// sequence on that connection.
func record(client, seq int) string {
	return fmt.Sprintf("c%02d %08d %s\n", client, seq, strings.Repeat("r", 20+seq%37))
}

// TestClusterLeaderKill sends newline-framed records from independent TCP
// clients through an engine into a stream with three replicas on a
// three-node JetStream cluster, each record a message of its own, kills the stream's leader with SIGKILL
// mid-stream and restarts it, then kills the node the publisher is
// connected to. It then reads the whole stream back in stream order and
// checks, per engine source (told apart by the source id in Nats-Msg-Id,
// never by address), that chunks come with sequence numbers 0, 1, 2, ...
// (each once, none out of order), and, per client, that every record it
// sent is there once and in order. On a cluster the publisher never
// pipelines a source's chunks.
func TestClusterLeaderKill(t *testing.T) {
	testClusterKill(t, 8, 1, 5*time.Millisecond)
}

// testClusterKill is TestClusterLeaderKill with clients sending perTick
// records every interval.
func testClusterKill(t *testing.T, clients, perTick int, every time.Duration) {
	begin := time.Now()
	cl := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A client of the test's own, for the stream's state.
	js := connectJS(t, cl.urls())
	const streamName = "CLUSTER"
	var stream njs.Stream
	var err error
	waitFor(t, 30*time.Second, "no stream with three replicas", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		stream, err = js.CreateStream(cctx, njs.StreamConfig{Name: streamName, Subjects: []string{"ingest.cluster"},
			Replicas: 3, Duplicates: 2 * time.Minute})
		return err == nil
	})
	// info returns the stream's cluster state, or nil while it has none.
	info := func() *njs.ClusterInfo {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		defer ccancel()
		si, err := stream.Info(cctx)
		if err != nil || si.Cluster == nil {
			return nil
		}
		return si.Cluster
	}
	leader := func() int {
		ci := info()
		if ci == nil {
			return -1
		}
		for i := range 3 {
			if ci.Leader == cl.name(i) {
				return i
			}
		}
		return -1
	}
	waitFor(t, 30*time.Second, "stream has no leader", func() bool { return leader() >= 0 })

	var mu sync.Mutex
	var pubErrs []string
	const prefix = "cluster-test"
	p, err := jetstream.New(ctx, jetstream.Config{
		URL: cl.urls(), Subject: "ingest.cluster", IDPrefix: prefix, MaxPending: 64,
		AckTimeout: time.Second, RetryWait: 50 * time.Millisecond,
	}, jetstream.WithErrorHandler(func(err error) {
		mu.Lock()
		pubErrs = append(pubErrs, err.Error())
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())

	// Each record is a message of its own, under the id
	// prefix.source.n, n counting the source's records: a node's
	// records of a socket.
	eos := make(chan struct{}, clients)
	var recMu sync.Mutex
	recs := map[srcs.ID]uint64{}
	e, addr := enginetest.Listen(t, engine.Config{Buffers: 64, BufSize: 4096, Handlers: 2}, srcs.ListenerConfig{Framer: srcs.Newline{}},
		[]engine.Option{engine.WithHandler(func(c engine.Chunk) {
			if c.Flags&srcs.EndOfStream != 0 {
				eos <- struct{}{}
			}
			var msgs []jetstream.Message
			recMu.Lock()
			n := recs[c.Source]
			for _, line := range bytes.SplitAfter(c.Data, []byte("\n")) {
				if len(line) == 0 {
					continue
				}
				msgs = append(msgs, jetstream.Message{ID: prefix + "." + strconv.FormatUint(uint64(c.Source), 10) + "." + strconv.FormatUint(n, 10), Data: line})
				n++
			}
			recs[c.Source] = n
			recMu.Unlock()
			p.Publish(c, msgs)
		})})
	defer e.Shutdown(context.Background())

	// Each client sends a few records every interval until told to stop, and
	// counts them.
	stop := make(chan struct{})
	sentN := make([]int, clients)
	var wg sync.WaitGroup
	var conns []net.Conn
	for i := range clients {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		wg.Go(func() {
			defer conn.Close()
			tick := time.NewTicker(every)
			defer tick.Stop()
			var buf []byte
			for seq := 0; ; {
				select {
				case <-stop:
					sentN[i] = seq
					return
				case <-tick.C:
				}
				buf = buf[:0]
				for range perTick {
					buf = append(buf, record(i, seq)...)
					seq++
				}
				if _, err := conn.Write(buf); err != nil {
					t.Errorf("client %d: %v", i, err)
					sentN[i] = seq - perTick
					return
				}
			}
		})
	}
	var clientsStopped atomic.Bool
	stopClients := func() {
		if clientsStopped.CompareAndSwap(false, true) {
			close(stop)
			wg.Wait()
		}
	}
	defer func() {
		if t.Failed() {
			// Clients may be blocked writing to a stalled engine.
			for _, c := range conns {
				c.SetWriteDeadline(time.Now())
			}
		}
		stopClients()
	}()

	acked := func() uint64 { return p.Stats().Acked }
	progress := func(what string) {
		t.Helper()
		from := acked()
		deadline := time.Now().Add(40 * time.Second)
		for acked() < from+100 {
			if time.Now().After(deadline) {
				t.Fatalf("after 40s: %s (publisher on %q: %+v; holding %s)", what, p.ConnectedURL(), p.Stats(), p.Held())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	progress("no chunk acknowledged before any kill")

	// The stream's leader dies mid-stream, and comes back.
	l := leader()
	if l < 0 {
		t.Fatal("stream has no leader")
	}
	start := time.Now()
	cl.kill(l)
	t.Logf("killed the stream leader %s; publisher on %s", cl.name(l), p.ConnectedURL())
	progress("no progress after the leader was killed")
	t.Logf("progress again %v after the kill", time.Since(start).Round(time.Millisecond))
	cl.start(l)
	t0 := time.Now()
	caughtUp := func() bool {
		ci := info()
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
			return false
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	}
	waitFor(t, 30*time.Second, "the restarted node did not catch up", caughtUp)

	t.Logf("%s restarted and current after %v", cl.name(l), time.Since(t0).Round(time.Millisecond))

	// Now the node the publisher is connected to.
	on := cl.node(p.ConnectedURL())
	if on < 0 {
		t.Fatalf("publisher connected to %q, not a cluster node", p.ConnectedURL())
	}
	start = time.Now()
	cl.kill(on)
	t.Logf("killed %s, the publisher's node (stream leader %s)", cl.name(on), cl.name(l))
	progress("no progress after the publisher's node was killed")
	t.Logf("progress again %v after the kill; publisher on %s", time.Since(start).Round(time.Millisecond), p.ConnectedURL())
	if got := cl.node(p.ConnectedURL()); got == on || got < 0 {
		t.Errorf("publisher on %q after its node %s was killed", p.ConnectedURL(), cl.name(on))
	}
	progress("no progress at the end")

	stopClients()
	timeout := time.After(60 * time.Second)
	for range clients {
		select {
		case <-eos:
		case <-timeout:
			t.Fatal("sources did not end")
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	defer scancel()
	if err := e.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(sctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("drained at %v", time.Since(begin).Round(time.Millisecond))
	st := p.Stats()
	mu.Lock()
	t.Logf("publisher: %+v; %d retried errors, first: %.200q", st, len(pubErrs), pubErrs[:min(3, len(pubErrs))])
	mu.Unlock()
	if st.Pending != 0 || st.Acked != st.Published {
		t.Fatalf("publisher stats: %+v", st)
	}
	if st.Pipelined != 0 {
		// See the publisher's "Pipelining one source".
		t.Errorf("%d chunks pipelined into a replicated stream", st.Pipelined)
	}

	// Back to three nodes for the reader: a consumer created while a
	// node is down may be placed on it.
	cl.start(on)
	waitFor(t, 30*time.Second, "the restarted node did not catch up", caughtUp)
	got := readStream(t, ctx, js, streamName, prefix)
	verifyClients(t, got, sentN)
	if got.msgs != int(st.Published) {
		t.Errorf("stream holds %d messages, %d chunks were published", got.msgs, st.Published)
	}
}

// streamRead is a stream read back in order, per engine source.
type streamRead struct {
	msgs    int
	order   []uint64            // sources in the order they first appear
	data    map[uint64][]byte   // each source's bytes, in stream order
	bad     map[uint64][]string // per source: what was out of order
	lastSeq map[uint64]uint64
}

// readStream reads the whole stream in stream order and checks that each
// source's chunks carry sequence numbers 0, 1, 2, ... in that order.
func readStream(t *testing.T, ctx context.Context, js njs.JetStream, name, prefix string) *streamRead {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	si, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: info: %v", name, err)
	}
	total := int(si.State.Msgs)
	if uint64(total) != si.State.LastSeq-si.State.FirstSeq+1 && total > 0 {
		t.Fatalf("stream %s: %d messages between sequences %d and %d", name, total, si.State.FirstSeq, si.State.LastSeq)
	}
	// One message at a time by its stream sequence, each read retried
	// while the cluster settles after the kills (a consumer's fetch can
	// fail for good on a moment without responders).
	get := func(seq uint64) *njs.RawStreamMsg {
		var m *njs.RawStreamMsg
		waitFor(t, 30*time.Second, fmt.Sprintf("stream %s: message %d unreadable", name, seq), func() bool {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			m, err = s.GetMsg(cctx, seq)
			return err == nil
		})
		return m
	}
	r := &streamRead{data: map[uint64][]byte{}, bad: map[uint64][]string{}, lastSeq: map[uint64]uint64{}}
	next := map[uint64]uint64{}
	for sseq := si.State.FirstSeq; r.msgs < total; sseq++ {
		m := get(sseq)
		r.msgs++
		id := m.Header.Get(njs.MsgIDHeader)
		src, seq, ok := parseMsgID(id, prefix)
		if !ok {
			t.Fatalf("message with id %q", id)
		}
		if _, seen := next[src]; !seen {
			r.order = append(r.order, src)
		}
		switch want := next[src]; {
		case seq == want:
			next[src]++
			r.data[src] = append(r.data[src], m.Data...)
		case seq < want:
			r.bad[src] = append(r.bad[src], fmt.Sprintf("chunk %d again at stream seq %d, after chunk %d", seq, m.Sequence, want-1))
		default:
			r.bad[src] = append(r.bad[src], fmt.Sprintf("chunk %d at stream seq %d, before chunk %d", seq, m.Sequence, want))
			// Go on from there, so that one late chunk counts once.
			next[src] = seq + 1
			r.data[src] = append(r.data[src], m.Data...)
		}
	}
	return r
}

// parseMsgID splits "<prefix>.<source>.<seq>".
func parseMsgID(id, prefix string) (src, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(id, prefix+".")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	src, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return src, seq, err1 == nil && err2 == nil
}

// verifyClients checks the stream against what each client sent: each
// source's chunks in order, each client's records in one source, every
// record once and in order.
func verifyClients(t *testing.T, r *streamRead, sentN []int) {
	t.Helper()
	reordered := 0
	for _, src := range r.order {
		if bad := r.bad[src]; len(bad) > 0 {
			reordered += len(bad)
			t.Errorf("source %d: %d chunks out of order, first: %s", src, len(bad), strings.Join(bad[:min(3, len(bad))], "; "))
		}
	}
	bySource := map[int]uint64{}
	for _, src := range r.order {
		lines := bytes.SplitAfter(r.data[src], []byte("\n"))
		if len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		if len(lines) == 0 {
			continue
		}
		var client int
		if _, err := fmt.Sscanf(string(lines[0]), "c%02d", &client); err != nil || client < 0 || client >= len(sentN) {
			t.Errorf("source %d starts with %q", src, lines[0])
			continue
		}
		if other, dup := bySource[client]; dup {
			t.Errorf("client %d's records in sources %d and %d", client, other, src)
		}
		bySource[client] = src
		want := 0
		for _, l := range lines {
			if string(l) != record(client, want) {
				t.Errorf("source %d (client %d): record %d is %q", src, client, want, l)
				break
			}
			want++
		}
		if want != sentN[client] {
			t.Errorf("client %d: sent %d records, the stream holds %d in order", client, sentN[client], want)
		}
	}
	if len(bySource) != len(sentN) {
		t.Errorf("records of %d clients in the stream, want %d", len(bySource), len(sentN))
	}
	t.Logf("stream: %d messages from %d sources, %d out of order; %d clients' records checked", r.msgs, len(r.order), reordered, len(bySource))
}
