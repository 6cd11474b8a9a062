package jetstream_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
)

// TestPipelinedSourceKeepsOrder: one fast source into a server outside
// any cluster has its chunks pipelined. While another client publishes
// into the same stream between them (so pipelined chunks are refused)
// and the server is stopped and restarted on its store mid-stream, the
// stream still holds every chunk of the source once and in order.
func TestPipelinedSourceKeepsOrder(t *testing.T) {
	dir := t.TempDir()
	ns := startServer(t, dir, -1)
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	defer func() { stopServer(ns) }()

	p, err := jetstream.New(context.Background(), jetstream.Config{
		URL: url, Subject: "pipe.s", Stream: "PIPE", MaxPending: 64,
		AckTimeout: time.Second, RetryWait: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())

	// Another publisher on the stream's subject, plain, every millisecond.
	other, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			m := nats.NewMsg("pipe.s")
			m.Header.Set(jetstream.HeaderSource, "other")
			m.Data = []byte("other\n")
			other.PublishMsg(m) // fire and forget; lost ones do not matter
		}
	})

	// The source hands chunks until well after the restart, so that
	// pipelining, refusals and the restart all happen mid-stream.
	chunk := func(seq uint64) []byte { return fmt.Appendf(nil, "%08d\n", seq) }
	var handedN atomic.Uint64
	stopHanding := make(chan struct{})
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		for seq := uint64(0); ; seq++ {
			select {
			case <-stopHanding:
				return
			default:
			}
			p.Handle(engine.Chunk{Source: 1, Name: "tcp://fast", Seq: seq, Data: chunk(seq)})
			handedN.Store(seq + 1)
		}
	}()

	// Restart the server once pipelining and refusals have happened.
	waitFor(t, 30*time.Second, "no chunk pipelined and refused", func() bool {
		st := p.Stats()
		return st.Pipelined > 100 && st.Rejected > 0
	})
	stopServer(ns)
	time.Sleep(300 * time.Millisecond)
	ns = startServer(t, dir, port)
	from := handedN.Load()
	waitFor(t, 30*time.Second, "no chunk handed after the restart", func() bool { return handedN.Load() >= from+1000 })
	close(stopHanding)
	<-handed
	chunks := handedN.Load()
	close(stop)
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	t.Logf("publisher: %+v", st)
	if st.Acked != chunks || st.Published != chunks || st.Pending != 0 {
		t.Fatalf("stats %+v: want %d chunks acknowledged", st, chunks)
	}

	s, err := connectJS(t, ns.ClientURL()).Stream(ctx, "PIPE")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var next uint64
	for sseq := info.State.FirstSeq; sseq <= info.State.LastSeq; sseq++ {
		m, err := s.GetMsg(ctx, sseq)
		if err != nil {
			t.Fatalf("stream seq %d: %v", sseq, err)
		}
		if m.Header.Get(jetstream.HeaderSource) != "tcp://fast" {
			continue
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.HeaderSeq), 10, 64)
		if err != nil || seq != next || string(m.Data) != string(chunk(seq)) {
			t.Fatalf("stream seq %d: chunk %d (%q), want chunk %d", sseq, seq, m.Data, next)
		}
		next++
	}
	if next != chunks {
		t.Fatalf("stream holds chunks 0 to %d of the source, want %d", next, chunks)
	}
}
