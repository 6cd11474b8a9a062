package engine_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// Ingest from a TCP port and count bytes until Ctrl-C: the README's
// example.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	ln, _ := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	e, _ := engine.New(engine.Config{Buffers: 64})
	e.AddListener(ln)

	go send(ln.Addr().String(), strings.Repeat("x", 100000)) // some load

	var total int
	for c, err := range e.Chunks(ctx) { // releases each chunk; Ctrl-C drains
		if err != nil {
			panic(err)
		}
		total += len(c.Data)
		if c.Flags&srcs.EndOfStream != 0 {
			stop() // the sender hung up: stop, as Ctrl-C would
		}
	}
	fmt.Println(total, "bytes")
	if err := e.Shutdown(context.Background()); err != nil {
		panic(err)
	}
	// Output: 100000 bytes
}

func send(addr, msg string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		panic(err)
	}
	c.Write([]byte(msg))
	c.Close()
}

// Close the books per connection of a reconnecting client: each
// connection but the last ends with a SessionEnd chunk.
func ExampleWithSessionEnds() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() { // a server that hangs up after each message
		for _, msg := range []string{"hello", "again"} {
			c, _ := ln.Accept()
			c.Write([]byte(msg))
			c.Close()
		}
	}()
	e, _ := engine.New(engine.Config{Buffers: 64})
	client, _ := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: ln.Addr().String()})
	e.AddSource(client, engine.WithSessionEnds())

	var bytes, sessions int
	for c, err := range e.Chunks(context.Background()) {
		if err != nil {
			panic(err)
		}
		bytes += len(c.Data)
		if c.SessionEnd {
			fmt.Printf("session %d: %d bytes\n", sessions, bytes)
			bytes = 0
			if sessions++; sessions == 2 {
				break
			}
		}
	}
	e.Shutdown(context.Background())
	// Output:
	// session 0: 5 bytes
	// session 1: 5 bytes
}

// Count the records of each connection of a newline-framed listener, in
// a state of the connection's own that the handler changes without a
// lock, and close its books at its end.
func ExampleWithSourceState() {
	type conn struct{ records int }
	ln, _ := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	ended := make(chan int)
	e, _ := engine.New(engine.Config{Buffers: 64}, engine.WithHandler(func(c engine.Chunk) {
		defer c.Release()
		st := c.State().(*conn)
		if c.Flags&srcs.EndOfStream != 0 {
			ended <- st.records
			return
		}
		st.records += strings.Count(string(c.Data), "\n")
	}))
	lines, _ := srcs.ParseFraming("newline")
	e.AddListener(ln, engine.WithFraming(lines),
		engine.WithSourceState(func(srcs.ID, string) any { return new(conn) }))

	send(ln.Addr().String(), strings.Repeat("a log line\n", 1000))
	fmt.Println(<-ended, "records")
	e.Shutdown(context.Background())
	// Output: 1000 records
}
