package jetstream_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/srcs"
)

// TestPublishMessages: a chunk handed to Publish becomes its messages,
// each with its own subject, id and headers, stored in order even when a
// chunk holds more messages than the window (MaxPending), and the chunk
// is released once, after its last message is stored. A message sent
// again under an id the stream holds is stored once.
func TestPublishMessages(t *testing.T) {
	for _, noPipe := range []bool{false, true} {
		t.Run(fmt.Sprintf("no_pipeline=%v", noPipe), func(t *testing.T) {
			ns := startServer(t, t.TempDir(), -1)
			defer stopServer(ns)
			p, err := jetstream.New(context.Background(), jetstream.Config{URL: ns.ClientURL(), Subject: "recs.default",
				Stream: "RECS", MaxPending: 3, NoPipeline: noPipe})
			if err != nil {
				t.Fatal(err)
			}
			js := connectJS(t, ns.ClientURL())
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := js.UpdateStream(ctx, njs.StreamConfig{Name: "RECS", Subjects: []string{"recs.>"}}); err != nil {
				t.Fatal(err)
			}
			// Forty lines in one write: a chunk or a few, each becoming
			// its lines, the last five repeating the ids of the first.
			const lines = 40
			ended := make(chan struct{})
			e, addr := enginetest.Listen(t, engine.Config{Buffers: 8, BufSize: 4096, Flush: -1}, srcs.ListenerConfig{Framer: srcs.Newline{}},
				[]engine.Option{engine.WithHandler(func(c engine.Chunk) {
					if c.Flags&srcs.EndOfStream != 0 {
						close(ended)
					}
					var msgs []jetstream.Message
					for _, line := range strings.SplitAfter(string(c.Data), "\n") {
						if line == "" {
							continue
						}
						n, _ := strconv.Atoi(strings.TrimSpace(line))
						subj := ""
						if n%2 == 1 {
							subj = "recs.odd." + strconv.Itoa(n%5)
						}
						msgs = append(msgs, jetstream.Message{Subject: subj, ID: "rec." + strconv.Itoa(n%(lines-5)),
							Data: []byte(strconv.Itoa(n)), Header: []jetstream.Field{{Key: "Rec-N", Value: strconv.Itoa(n)}}})
					}
					p.Publish(c, msgs)
				})})
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for n := range lines {
				fmt.Fprintf(&b, "%d\n", n)
			}
			conn.Write([]byte(b.String()))
			conn.Close()
			<-ended
			if err := e.Shutdown(ctx); err != nil { // every chunk released
				t.Fatal(err)
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			st := p.Stats()
			if st.Acked != lines || st.Duplicates != 5 {
				t.Fatalf("stats %+v: want %d acknowledged, 5 duplicates", st, lines)
			}
			cons, err := js.OrderedConsumer(ctx, "RECS", njs.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for n := range lines - 5 {
				m, err := cons.Next(njs.FetchMaxWait(5 * time.Second))
				if err != nil {
					t.Fatalf("message %d: %v", n, err)
				}
				wantSubj := "recs.default"
				if n%2 == 1 {
					wantSubj = "recs.odd." + strconv.Itoa(n%5)
				}
				if string(m.Data()) != strconv.Itoa(n) || m.Subject() != wantSubj || m.Headers().Get("Rec-N") != strconv.Itoa(n) ||
					m.Headers().Get(njs.MsgIDHeader) != "rec."+strconv.Itoa(n) || !strings.HasPrefix(m.Headers().Get(jetstream.HeaderSource), "tcp://127.0.0.1:") {
					t.Fatalf("message %d: %q on %s, headers %v", n, m.Data(), m.Subject(), m.Headers())
				}
			}
		})
	}
}
