package jetstream_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/srcs"
)

// TestBackpressureReachesTheSender: while JetStream is down, no chunk is
// acknowledged, so none is released; the pool runs dry, the source stops
// reading, and the TCP sender blocks. Once the server is back, every byte
// arrives in the stream.
func TestBackpressureReachesTheSender(t *testing.T) {
	dir := t.TempDir()
	ns := startServer(t, dir, -1)
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	defer func() { stopServer(ns) }()
	const pending, buffers = 4, 16
	p, err := jetstream.New(context.Background(), jetstream.Config{
		URL: url, Subject: "bp", Stream: "BP", MaxPending: pending, AckTimeout: 500 * time.Millisecond,
		RetryWait: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	eos := make(chan struct{}, 1)
	e, addr := enginetest.Listen(t, engine.Config{Buffers: buffers, BufSize: 4096, Handlers: 1}, srcs.ListenerConfig{}, []engine.Option{engine.WithHandler(func(c engine.Chunk) {
		if c.Flags&srcs.EndOfStream != 0 {
			eos <- struct{}{}
		}
		p.Handle(c)
	})})
	stopServer(ns)

	// Far more than the pool, the publisher and the socket buffers hold.
	data := make([]byte, 24<<20)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	n, err := c.Write(data)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write while JetStream is down: %d bytes, %v; want the sender blocked", n, err)
	}
	if st := p.Stats(); st.Acked != 0 || st.Pending > pending {
		t.Fatalf("publisher while down: %+v", st)
	}
	if in := e.Pool().Stats().InUse; in == 0 {
		t.Fatal("no buffer held while JetStream is down")
	}

	ns = startServer(t, dir, port)
	c.SetWriteDeadline(time.Time{})
	if _, err := c.Write(data[n:]); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-eos:
	case <-time.After(60 * time.Second):
		t.Fatal("source did not end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := stream(t, url, "BP")
	total := 0
	for _, chunks := range got {
		for _, b := range chunks {
			total += len(b)
		}
	}
	if total != len(data) {
		t.Fatalf("stream holds %d bytes, sent %d", total, len(data))
	}
}

// TestCloseGivesUp: with the server gone and a Handle blocked on a full
// window, Close with a short context returns an error, and the blocked
// Handle returns too.
func TestCloseGivesUp(t *testing.T) {
	ns := startServer(t, t.TempDir(), -1)
	p, err := jetstream.New(context.Background(), jetstream.Config{URL: ns.ClientURL(), Subject: "gone", Stream: "GONE", MaxPending: 1})
	if err != nil {
		stopServer(ns)
		t.Fatal(err)
	}
	stopServer(ns)
	// The first fits the window, so it is in flight before Close; the
	// others may block on the full window.
	p.Handle(engine.Chunk{Source: 1, Seq: 0, Data: []byte("x")})
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		for seq := uint64(1); seq < 4; seq++ {
			p.Handle(engine.Chunk{Source: 1, Seq: seq, Data: []byte("x")})
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want it to give up", err)
	}
	<-handled
	if st := p.Stats(); st.Acked != 0 {
		t.Fatalf("acked with no server: %+v", st)
	}
}
