package engine_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

func TestUnreachablePeerIsReported(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	// A free port: listen, note it, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	errs := make(chan error, 16)
	e, err := engine.New(engine.Config{Buffers: 16}, engine.WithErrorHandler(func(err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	client, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: addr, Backoff: srcs.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.AddSource(client)
	if err != nil {
		t.Fatal(err)
	}
	// Errors travel behind the source's data, so they reach the handler
	// as the consumer pulls.
	chunks := make(chan engine.Chunk, 1)
	go func() {
		ch, err := e.Next(context.Background())
		if err == nil {
			chunks <- ch
		}
		close(chunks)
	}()
	for i := range 3 {
		select {
		case err := <-errs:
			var se *srcs.SourceError
			if !errors.As(err, &se) || se.ID != id || se.Op != "open" {
				t.Fatalf("error %d: %v; want an open error naming source %d", i, err, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 3 open failures reported", i)
		}
	}
	// After its attempts the source fails for good and ends.
	ch, ok := <-chunks
	if !ok || ch.Flags&srcs.EndOfStream == 0 || ch.Source != id {
		t.Fatalf("after the last attempt: chunk %+v; want the end of source %d", ch, id)
	}
	ch.Release()
}
