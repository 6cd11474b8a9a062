// Command netlinecount is linecount written on Go's net package instead
// of sluice: the same flag, the same output, a goroutine per connection
// counting its lines through bufio, and on SIGINT or SIGTERM a drain that
// closes the listener and the connections and prints every count. It is
// the yardstick TestWeight holds linecount's binary to: what a program
// that does this much pays without sluice.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5514", "the TCP address to listen on")
	flag.Parse()
	if err := run(*listen, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "netlinecount:", err)
		os.Exit(1)
	}
}

func run(listen string, out, log io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(log, "listening on", ln.Addr())

	var (
		mu           sync.Mutex
		open         = map[net.Conn]bool{}
		conns, total int
		wg           sync.WaitGroup
	)
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			fmt.Fprintln(log, "netlinecount:", err)
			continue
		}
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			c.Close()
			break
		}
		open[c] = true
		mu.Unlock()
		wg.Go(func() {
			name := "tcp://" + c.RemoteAddr().String()
			r := bufio.NewReaderSize(c, 64<<10)
			lines := 0
			for {
				_, err := r.ReadSlice('\n')
				if err == nil {
					if lines++; lines == 1 {
						fmt.Fprintln(log, name, "sends")
					}
					continue
				}
				if !errors.Is(err, bufio.ErrBufferFull) {
					break
				}
			}
			mu.Lock()
			delete(open, c)
			c.Close()
			fmt.Fprintf(out, "%s: %d lines\n", name, lines)
			conns++
			total += lines
			mu.Unlock()
		})
	}
	wg.Wait()
	fmt.Fprintf(out, "%d connections, %d lines\n", conns, total)
	return nil
}
