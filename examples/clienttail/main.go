// Command clienttail reads lines from two sources: a TCP server it dials,
// and dials again whenever the connection ends or fails, and a file it
// follows through rotation, keeping its place in a checkpoint. It prints
// each connection's count as it ends; on SIGINT or SIGTERM it drains,
// saves the tail's place, and prints the totals.
//
//	go run ./examples/clienttail -addr 127.0.0.1:7000 -tail /var/log/app.log
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7000", "the TCP server to dial")
	path := flag.String("tail", "app.log", "the file to follow")
	flag.Parse()
	if err := run(*addr, *path, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "clienttail:", err)
		os.Exit(1)
	}
}

func run(addr, path string, out, log io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	e, err := engine.New(engine.Config{},
		engine.WithErrorHandler(func(err error) { fmt.Fprintln(log, "clienttail:", err) }))
	if err != nil {
		return err
	}
	defer e.Shutdown(context.Background()) // after an error below; else a no-op
	lines, err := srcs.ParseFraming("newline")
	if err != nil {
		return err
	}
	client, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: addr, Backoff: srcs.Backoff{Max: time.Second}})
	if err != nil {
		return err
	}
	// Each connection ends with a SessionEnd chunk, the last with the
	// end of stream.
	dialer, err := e.AddSource(client, engine.WithFraming(lines), engine.WithSessionEnds())
	if err != nil {
		return err
	}
	tail, err := srcs.NewTail(srcs.TailConfig{Path: path, Checkpoint: path + ".ckpt", FromStart: true})
	if err != nil {
		return err
	}
	if _, err := e.AddSource(tail, engine.WithFraming(lines)); err != nil {
		return err
	}
	fmt.Fprintln(log, "dialing", addr, "and following", path)

	sessions, session, received, followed := 0, 0, 0, 0
	for c, err := range e.Chunks(ctx) { // releases each chunk; Ctrl-C drains
		if err != nil {
			return err
		}
		n := bytes.Count(c.Data, []byte{'\n'})
		if c.Source != dialer {
			followed += n
			continue
		}
		session += n
		received += n
		if c.SessionEnd || c.Flags&srcs.EndOfStream != 0 && session > 0 {
			sessions++
			fmt.Fprintf(out, "connection %d: %d lines\n", sessions, session)
			session = 0
		}
	}
	fmt.Fprintf(out, "%s: %d connections, %d lines; %s: %d lines\n", addr, sessions, received, path, followed)
	return e.Shutdown(context.Background())
}
