package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// udp sends datagrams of random sizes to a srcs.UDPSource added to the
// engine and checks that they arrive whole and in order, in chunks
// flagged Datagrams and framed as ForEachDatagram documents; then that a
// datagram larger than a buffer is dropped and reported as the engine
// reports it (a srcs.SourceError naming the source, wrapping
// srcs.ErrDatagramTooLarge, counted in SourceStats.DatagramsTooLarge),
// and the source goes on. How a runner frames, packs and drops datagrams
// is runnertest's TestDatagrams.
func udp(t *testing.T, runner string) {
	t.Setenv(engine.EnvRunner, "")
	errs := make(chan error, 16)
	e, err := engine.New(engine.Config{Runner: runner, Workers: 1, Buffers: 32, BufSize: 4096, Flush: time.Millisecond},
		engine.WithErrorHandler(func(err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	src, err := srcs.ListenUDP(srcs.UDPConfig{Addr: "127.0.0.1:0", ReadBuffer: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.AddSource(src)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got [][]byte
	var badFrame error
	done := make(chan struct{})
	go func() {
		defer close(done)
		pullAll(e, func(c engine.Chunk) {
			if c.Flags&srcs.EndOfStream != 0 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c.Flags&srcs.Datagrams == 0 {
				badFrame = errors.New("a UDP chunk without the Datagrams flag")
			}
			if err := srcs.ForEachDatagram(c.Data, func(p []byte) bool {
				got = append(got, append([]byte(nil), p...))
				return true
			}); err != nil {
				badFrame = err
			}
		})
	}()
	conn, err := net.Dial("udp", src.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := rand.New(rand.NewPCG(7, 7))
	var sent [][]byte
	for i := range 300 {
		d := make([]byte, 4+r.IntN(1400))
		binary.LittleEndian.PutUint32(d, uint32(i))
		sent = append(sent, d)
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // stay well inside the receive buffer
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	waitUntil(t, "300 datagrams", func() bool {
		var drops uint64
		for _, s := range e.Stats().Sources {
			if s.ID == id {
				drops = s.KernelDrops
			}
		}
		return count()+int(drops) >= len(sent)
	})
	mu.Lock()
	if badFrame != nil {
		t.Fatal(badFrame)
	}
	// Loopback at this pace drops nothing; if the kernel did drop, the
	// survivors must still be in order.
	j := 0
	for _, d := range got {
		for j < len(sent) && string(sent[j]) != string(d) {
			j++
		}
		if j == len(sent) {
			t.Fatalf("%s: datagram %x... out of order or corrupted", runner, d[:min(4, len(d))])
		}
		j++
	}
	n := len(got)
	mu.Unlock()
	// Too large for a 4 KiB buffer: dropped and reported; the next one
	// still arrives.
	if _, err := conn.Write(make([]byte, 9000)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("after the big one")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		var se *srcs.SourceError
		if !errors.Is(err, srcs.ErrDatagramTooLarge) || !errors.As(err, &se) || se.ID != id {
			t.Fatalf("%s: error %v, want ErrDatagramTooLarge naming source %d", runner, err, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the oversized datagram was never reported", runner)
	}
	waitUntil(t, "the datagram after the big one", func() bool { return count() > n })
	mu.Lock()
	if last := string(got[len(got)-1]); last != "after the big one" {
		t.Fatalf("%s: last datagram %q", runner, last)
	}
	mu.Unlock()
	for _, s := range e.Stats().Sources {
		if s.ID == id && s.DatagramsTooLarge != 1 {
			t.Fatalf("%s: DatagramsTooLarge = %d, want 1", runner, s.DatagramsTooLarge)
		}
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
}
