// Command slowcount counts the lines each connection to a TCP port sends,
// as linecount does, but in push mode, with a slow consumer: the handler
// takes a millisecond over every chunk. The pool and TCP's window hold
// the senders back meanwhile, and nothing is lost. On SIGINT or SIGTERM
// it drains: Shutdown returns once every chunk read has been handled,
// every connection's end included; then it prints the totals.
//
//	go run ./examples/slowcount -listen 127.0.0.1:5514
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5514", "the TCP address to listen on")
	flag.Parse()
	if err := run(*listen, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "slowcount:", err)
		os.Exit(1)
	}
}

func run(listen string, out, log io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var mu sync.Mutex // the handlers run on several goroutines
	conns, total := 0, 0
	handle := func(c engine.Chunk) {
		defer c.Release()
		// A source's chunks come one at a time, in order: its count
		// needs no lock.
		n := c.State().(*int)
		*n += bytes.Count(c.Data, []byte{'\n'})
		time.Sleep(time.Millisecond) // the slow part
		if c.Flags&srcs.EndOfStream != 0 {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(out, "%s: %d lines\n", c.Name, *n)
			conns++
			total += *n
		}
	}
	e, err := engine.New(engine.Config{}, engine.WithHandler(handle),
		engine.WithErrorHandler(func(err error) { fmt.Fprintln(log, "slowcount:", err) }))
	if err != nil {
		return err
	}
	lines, err := srcs.ParseFraming("newline")
	if err != nil {
		return err
	}
	ln, err := srcs.ListenTCP(listen, srcs.ListenerConfig{Framer: lines})
	if err == nil {
		err = e.AddListener(ln, engine.WithSourceState(func(srcs.ID, string) any { return new(int) }))
	}
	if err != nil {
		e.Shutdown(context.Background())
		return err
	}
	fmt.Fprintln(log, "listening on", ln.Addr())

	<-ctx.Done() // Ctrl-C
	err = e.Shutdown(context.Background())
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "%d connections, %d lines\n", conns, total)
	return err
}
