// Command linecount counts the lines that each connection to a TCP port
// sends, in pull mode, until SIGINT or SIGTERM; then it drains, and
// prints each connection's count as it ends and the totals.
//
//	go run ./examples/linecount -listen 127.0.0.1:5514
//
// It is the program docs/library.md teaches: chunks framed into whole
// lines, a count of the connection's own in WithSourceState, a loop over
// Chunks whose context Ctrl-C ends, which drains the engine and still
// yields every connection's end.
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

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5514", "the TCP address to listen on")
	flag.Parse()
	if err := run(*listen, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "linecount:", err)
		os.Exit(1)
	}
}

func run(listen string, out, log io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	lines, err := srcs.ParseFraming("newline")
	if err != nil {
		return err
	}
	ln, err := srcs.ListenTCP(listen, srcs.ListenerConfig{Framer: lines})
	if err != nil {
		return err
	}
	e, err := engine.New(engine.Config{},
		engine.WithErrorHandler(func(err error) { fmt.Fprintln(log, "linecount:", err) }))
	if err != nil {
		ln.Close()
		return err
	}
	// Each connection counts its own lines.
	type conn struct{ lines, chunks int }
	err = e.AddListener(ln, engine.WithSourceState(func(srcs.ID, string) any { return new(conn) }))
	if err != nil {
		ln.Close()
		e.Shutdown(context.Background())
		return err
	}
	fmt.Fprintln(log, "listening on", ln.Addr())

	conns, total := 0, 0
	for c, err := range e.Chunks(ctx) { // releases each chunk; Ctrl-C drains
		if err != nil {
			return err
		}
		st := c.State().(*conn)
		if st.chunks++; st.chunks == 1 && len(c.Data) > 0 {
			fmt.Fprintln(log, c.Name, "sends")
		}
		st.lines += bytes.Count(c.Data, []byte{'\n'})
		if c.Flags&srcs.EndOfStream != 0 {
			fmt.Fprintf(out, "%s: %d lines\n", c.Name, st.lines)
			conns++
			total += st.lines
		}
	}
	fmt.Fprintf(out, "%d connections, %d lines\n", conns, total)
	return e.Shutdown(context.Background())
}
