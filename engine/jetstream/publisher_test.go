package jetstream_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/srcs"
)

// startServer runs an embedded NATS server with JetStream, storing into
// dir, on port (-1: any free port).
func startServer(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats server did not start")
	}
	return ns
}

// connectJS connects a client of the test's own to url (reconnecting, for
// clusters whose nodes come and go) and returns its JetStream context; the
// connection closes when the test ends.
func connectJS(t testing.TB, url string) njs.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func stopServer(ns *server.Server) {
	ns.Shutdown()
	ns.WaitForShutdown()
}

// sent is what one test client wrote, keyed later by the name the engine
// gives its connection.
type sent struct {
	name string
	data []byte
}

// stream reads every message of a stream and returns them grouped by
// source name, each indexed by sequence number.
func stream(t *testing.T, url, name string) (map[string]map[uint64][]byte, int) {
	t.Helper()
	js := connectJS(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := int(info.State.Msgs)
	cons, err := s.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[uint64][]byte{}
	for got := 0; got < total; {
		batch, err := cons.Fetch(min(total-got, 500), njs.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got++
			src := m.Headers().Get(jetstream.HeaderSource)
			seq, err := strconv.ParseUint(m.Headers().Get(jetstream.HeaderSeq), 10, 64)
			if err != nil {
				t.Fatalf("message without a sequence: %v", m.Headers())
			}
			if out[src] == nil {
				out[src] = map[uint64][]byte{}
			}
			if _, dup := out[src][seq]; dup {
				t.Errorf("%s chunk %d stored twice", src, seq)
			}
			out[src][seq] = bytes.Clone(m.Data())
		}
		if batch.Error() != nil {
			t.Fatal(batch.Error())
		}
	}
	return out, total
}

// TestPublishSurvivesServerRestart streams from TCP clients through an
// engine into JetStream, restarts the server mid-stream, and checks that
// the stream holds every byte exactly once.
func TestPublishSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	ns := startServer(t, dir, -1)
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	defer func() { stopServer(ns) }()

	var mu sync.Mutex
	var errs []error
	p, err := jetstream.New(context.Background(), jetstream.Config{
		URL: url, Subject: "ingest.test", Stream: "INGEST", MaxPending: 16,
		AckTimeout: time.Second, RetryWait: 20 * time.Millisecond,
	}, jetstream.WithErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())

	const clients, per = 6, 192 << 10
	half := make(chan struct{})
	eos := make(chan struct{}, clients)
	var handled sync.Once
	var bytesIn int64
	var bmu sync.Mutex
	h := func(c engine.Chunk) {
		if c.Flags&srcs.EndOfStream != 0 {
			eos <- struct{}{}
		}
		bmu.Lock()
		bytesIn += int64(len(c.Data))
		if bytesIn >= clients*per/2 {
			handled.Do(func() { close(half) })
		}
		bmu.Unlock()
		p.Handle(c)
	}
	e, addr := enginetest.Listen(t, engine.Config{Buffers: 32, BufSize: 4096, Handlers: 2}, srcs.ListenerConfig{}, []engine.Option{engine.WithHandler(h)})

	want := make([]sent, clients)
	var wg sync.WaitGroup
	for i := range want {
		data := make([]byte, per)
		r := rand.New(rand.NewPCG(uint64(i), 1))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = sent{name: "tcp://" + c.LocalAddr().String(), data: data}
		wg.Go(func() {
			defer c.Close()
			for off := 0; off < len(data); off += 8 << 10 {
				if _, err := c.Write(data[off:min(off+8<<10, len(data))]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}

	<-half
	stopServer(ns)
	ns = startServer(t, dir, port)

	wg.Wait()
	timeout := time.After(60 * time.Second)
	for range clients {
		select {
		case <-eos:
		case <-timeout:
			t.Fatal("sources did not end")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	t.Logf("publisher: %+v; %d retried errors", st, len(errs))
	if st.Pending != 0 || st.Acked != st.Published {
		t.Fatalf("publisher stats: %+v", st)
	}

	got, total := stream(t, url, "INGEST")
	if total != int(st.Published) {
		t.Errorf("stream holds %d messages, %d chunks were published", total, st.Published)
	}
	for _, w := range want {
		chunks := got[w.name]
		var buf []byte
		for seq := range uint64(len(chunks)) {
			b, ok := chunks[seq]
			if !ok {
				t.Fatalf("%s: chunk %d missing from the stream", w.name, seq)
			}
			buf = append(buf, b...)
		}
		if !bytes.Equal(buf, w.data) {
			t.Errorf("%s: stream holds %d bytes, differing from the %d sent", w.name, len(buf), len(w.data))
		}
	}
	if len(got) != clients {
		t.Errorf("stream has chunks of %d sources, want %d", len(got), clients)
	}
}

// TestConfigErrors: bad configuration names the field.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  jetstream.Config
		want string
	}{
		{jetstream.Config{}, "jetstream: config: subject: required"},
		{jetstream.Config{Subject: "s", MaxPending: -1}, "jetstream: config: max_pending: -1: must not be negative"},
		{jetstream.Config{Subject: "s", AckTimeout: -1}, "jetstream: config: ack_timeout: -1ns: must not be negative"},
	} {
		_, err := jetstream.New(context.Background(), tc.cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestRedeliveryIsDeduplicated: a chunk published again under the same
// prefix, source and sequence (what a retry after a lost ack sends) is
// stored once, and the second ack says so.
func TestRedeliveryIsDeduplicated(t *testing.T) {
	ns := startServer(t, t.TempDir(), -1)
	defer stopServer(ns)
	cfg := jetstream.Config{URL: ns.ClientURL(), Subject: "dedup", Stream: "DEDUP", IDPrefix: "node-a"}
	for round := range 2 {
		p, err := jetstream.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for seq := range uint64(3) {
			p.Handle(engine.Chunk{Source: 7, Name: "tcp://x", Seq: seq, Data: []byte("payload")})
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := p.Stats(); st.Acked != 3 || st.Duplicates != uint64(3*round) {
			t.Fatalf("round %d: %+v", round, st)
		}
	}
	if _, total := stream(t, ns.ClientURL(), "DEDUP"); total != 3 {
		t.Fatalf("stream holds %d messages, want 3", total)
	}
}

// TestRetriesReportEachChunkOnce: while no stream takes the subject,
// every publish fails and is retried each RetryWait; the error handler
// hears of each chunk once, not at every retry, and the chunks are stored
// once a stream appears.
func TestRetriesReportEachChunkOnce(t *testing.T) {
	ns := startServer(t, t.TempDir(), -1)
	defer stopServer(ns)
	var mu sync.Mutex
	var errs []error
	p, err := jetstream.New(context.Background(), jetstream.Config{
		URL: ns.ClientURL(), Subject: "late.stream", RetryWait: 5 * time.Millisecond,
	}, jetstream.WithErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	const chunks = 3
	for seq := range uint64(chunks) {
		p.Handle(engine.Chunk{Source: srcs.ID(seq), Name: "tcp://x", Seq: 0, Data: []byte("payload")})
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Retries < 10*chunks {
		if time.Now().After(deadline) {
			t.Fatalf("only %d retries", p.Stats().Retries)
		}
		time.Sleep(5 * time.Millisecond) // counting retries, which nothing signals
	}
	js := connectJS(t, ns.ClientURL())
	if _, err := js.CreateStream(context.Background(), njs.StreamConfig{Name: "LATE", Subjects: []string{"late.stream"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if st := p.Stats(); st.Acked != chunks || len(errs) != chunks {
		t.Fatalf("%d chunks acknowledged after %d retries, %d errors reported (%v); want %d of each", st.Acked, st.Retries, len(errs), errs, chunks)
	}
}
