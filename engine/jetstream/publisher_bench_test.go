package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
)

// BenchmarkPublish publishes 1 KiB chunks of 64 sources, each acknowledged
// by a nats-server in a process of its own (memory storage), so the
// allocations reported are the publisher's and the NATS client's alone:
// Handle, the publish, the acknowledgement and the release.
func BenchmarkPublish(b *testing.B) {
	srv := startNodes(b, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := jetstream.New(ctx, jetstream.Config{URL: srv.url(0), Subject: "bench", Stream: "BENCH",
		Storage: "memory", IDPrefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1024)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	const sources = 64
	var n uint64
	for b.Loop() {
		p.Handle(engine.Chunk{Source: srcs.ID(n % sources), Name: "tcp://127.0.0.1:1", Seq: n / sources,
			Data: data, Flags: srcs.Records})
		n++
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if st := p.Stats(); st.Acked != n {
		b.Fatalf("%d published, %+v", n, st)
	}
}
