package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// Ingest newline-delimited logs over TCP, one whole line at a time: the
// example of docs/framing.md. The client writes lines in pieces that cut
// them anywhere; every chunk still holds whole lines.
func Example_newlineLogs() {
	ln, _ := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{
		Framer: srcs.Newline{Max: 4096}, // longer lines are skipped and counted
	})
	e, _ := engine.New(engine.Config{Buffers: 64})
	e.AddListener(ln)

	go func() {
		c, _ := net.Dial("tcp", ln.Addr().String())
		c.Write([]byte("level=info msg=\"started\"\nlevel=warn msg=\"disk 91"))
		c.Write([]byte("% full\"\nlevel=info msg=\"stopped\"\n"))
		c.Close()
	}()

	for lines := 0; lines < 3; {
		c, _ := e.Next(context.Background())
		if c.Flags&srcs.Records != 0 {
			sc := bufio.NewScanner(bytes.NewReader(c.Data))
			for sc.Scan() {
				fmt.Println(sc.Text())
				lines++
			}
		}
		c.Release()
	}
	e.Shutdown(context.Background())
	// Output:
	// level=info msg="started"
	// level=warn msg="disk 91% full"
	// level=info msg="stopped"
}
