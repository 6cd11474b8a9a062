package engine_test

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// Ingest from a TCP port and count bytes: the README's example.
func Example() {
	ln, _ := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	e, _ := engine.New(engine.Config{Buffers: 64})
	e.AddListener(ln)

	go send(ln.Addr().String(), strings.Repeat("x", 100000)) // some load

	var total int
	for c, err := range e.Chunks(context.Background()) { // releases each chunk
		if err != nil {
			panic(err)
		}
		total += len(c.Data)
		if c.Flags&srcs.EndOfStream != 0 {
			break // the sender hung up
		}
	}
	fmt.Println(total, "bytes")
	e.Shutdown(context.Background())
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
