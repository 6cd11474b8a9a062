package jetstream_test

import (
	"context"
	"net"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/srcs"
)

// TestPublishRecordsHeader: messages of a framed source say whether they
// hold whole records, so a consumer of the stream can tell the part of a
// line its source never finished from a line.
func TestPublishRecordsHeader(t *testing.T) {
	ns := startServer(t, t.TempDir(), -1)
	defer stopServer(ns)
	p, err := jetstream.New(context.Background(), jetstream.Config{URL: ns.ClientURL(), Subject: "ingest.lines", Stream: "LINES"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ended := make(chan struct{})
	e, addr := enginetest.Listen(t, engine.Config{Buffers: 16, BufSize: 4096, Flush: -1}, srcs.ListenerConfig{Framer: srcs.Newline{}}, []engine.Option{engine.WithHandler(func(c engine.Chunk) {
		if c.Flags&srcs.EndOfStream != 0 {
			close(ended)
		}
		p.Handle(c)
	})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("one\ntwo\n"))
	time.Sleep(20 * time.Millisecond) // a read of its own, most likely
	c.Write([]byte("three, unfinished"))
	c.Close()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the source did not end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	js := connectJS(t, ns.ClientURL())
	cons, err := js.OrderedConsumer(ctx, "LINES", njs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var whole, truncated []string
	for len(truncated) == 0 {
		m, err := cons.Next(njs.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %q whole and no truncated message: %v", whole, err)
		}
		switch h := m.Headers().Get(jetstream.HeaderRecords); h {
		case "whole":
			whole = append(whole, string(m.Data()))
		case "truncated":
			truncated = append(truncated, string(m.Data()))
		default:
			t.Fatalf("message %q with %s %q", m.Data(), jetstream.HeaderRecords, h)
		}
	}
	if got := truncated[0]; got != "three, unfinished" && got != "one\ntwo\nthree, unfinished" {
		t.Errorf("truncated message %q", got)
	}
}
