package engine_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestSessionEnds: a reconnecting TCP client added WithSessionEnds marks
// the end of each connection with an empty SessionEnd chunk, in order
// between the connections' data, with its own Seq and the counters at
// that point; without the option the sessions' chunks run on unmarked.
func TestSessionEnds(t *testing.T) {
	sessions := []string{"first session", "second"}
	for _, tc := range []struct {
		name  string
		marks bool
	}{
		{"WithSessionEnds", true},
		{"default", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(engine.EnvRunner, "")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served, stop := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(served)
				for _, msg := range sessions {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Write([]byte(msg))
					c.Close()
				}
				// Further dials are accepted and held open, so the client
				// stays in its third session until Shutdown.
				c, err := ln.Accept()
				if err == nil {
					<-stop
					c.Close()
				}
			}()
			e, err := engine.New(engine.Config{Buffers: 16, BufSize: 4096, Flush: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			client, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: ln.Addr().String(),
				Backoff: srcs.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			var opts []engine.SourceOption
			if tc.marks {
				opts = append(opts, engine.WithSessionEnds())
			}
			if _, err := e.AddSource(client, opts...); err != nil {
				t.Fatal(err)
			}
			var got []string // each session's bytes
			cur, seq, bytes := "", uint64(0), uint64(0)
			shut := false
			for c, err := range e.Chunks(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				if c.Seq != seq {
					t.Fatalf("chunk %d, want %d", c.Seq, seq)
				}
				seq++
				cur += string(c.Data)
				bytes += uint64(len(c.Data))
				if c.SessionEnd {
					if len(c.Data) != 0 || c.Final == nil || c.Final.Bytes != bytes || c.Flags&srcs.EndOfStream != 0 {
						t.Fatalf("session end: %d bytes, flags %v, Final %+v; want an empty chunk counting %d bytes", len(c.Data), c.Flags, c.Final, bytes)
					}
					got = append(got, cur)
					cur = ""
				}
				if c.Flags&srcs.EndOfStream != 0 {
					got = append(got, cur)
					break
				}
				if !shut && (len(got) == len(sessions) || !tc.marks && cur == sessions[0]+sessions[1]) {
					shut = true
					go e.Shutdown(context.Background())
				}
			}
			want := []string{sessions[0] + sessions[1]}
			if tc.marks {
				want = []string{sessions[0], sessions[1], ""}
			}
			if len(got) != len(want) {
				t.Fatalf("sessions %q, want %q", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("sessions %q, want %q", got, want)
				}
			}
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			close(stop)
			ln.Close()
			<-served
		})
	}
}
