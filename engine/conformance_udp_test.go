package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// pullAll pulls chunks until the engine closes, handing each to f and
// releasing it.
func pullAll(e *engine.Engine, f func(engine.Chunk)) {
	for {
		c, err := e.Next(context.Background())
		if err != nil {
			return
		}
		f(c)
		c.Release()
	}
}

// TestConformanceUDP sends datagrams of random sizes to a UDP source and
// checks, per runner, that they arrive whole and in order, framed as
// ForEachDatagram documents; then that a datagram larger than a buffer is
// dropped, reported after the datagrams before it, and the source goes on.
func TestConformanceUDP(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
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
	})
}

// TestConformanceUnixSockets runs 100 unix-socket connections through a
// listener on every runner; each stream arrives byte-exact.
func TestConformanceUnixSockets(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		e, err := engine.New(engine.Config{Runner: runner, Workers: 2, Buffers: 64, BufSize: 8 << 10, Flush: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "sluice.sock")
		ln, err := srcs.ListenUnix(path, srcs.ListenerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.AddListener(ln); err != nil {
			t.Fatal(err)
		}
		type rec struct {
			data []byte
			eos  bool
		}
		var mu sync.Mutex
		streams := map[srcs.ID]*rec{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			pullAll(e, func(c engine.Chunk) {
				mu.Lock()
				defer mu.Unlock()
				r := streams[c.Source]
				if r == nil {
					r = &rec{}
					streams[c.Source] = r
				}
				r.data = append(r.data, c.Data...)
				r.eos = r.eos || c.Flags&srcs.EndOfStream != 0
			})
		}()
		const n = 100
		want := make(map[uint64]uint32, n)
		var wg sync.WaitGroup
		var wmu sync.Mutex
		for i := range n {
			wg.Go(func() {
				c, err := net.Dial("unix", path)
				if err != nil {
					t.Error(err)
					return
				}
				r := rand.New(rand.NewPCG(uint64(i), 3))
				msg := make([]byte, 8+r.IntN(64<<10))
				binary.LittleEndian.PutUint64(msg, uint64(i))
				for j := 8; j < len(msg); j++ {
					msg[j] = byte(r.Uint32())
				}
				for off := 0; off < len(msg); {
					k := min(len(msg)-off, 1+r.IntN(8<<10))
					if _, err := c.Write(msg[off : off+k]); err != nil {
						t.Error(err)
						return
					}
					off += k
				}
				c.Close()
				wmu.Lock()
				want[uint64(i)] = crc32.Checksum(msg, srcstest.Castagnoli)
				wmu.Unlock()
			})
		}
		wg.Wait()
		waitUntil(t, "every unix stream's end", func() bool {
			mu.Lock()
			defer mu.Unlock()
			ended := 0
			for _, r := range streams {
				if r.eos {
					ended++
				}
			}
			return ended == n
		})
		mu.Lock()
		for id, r := range streams {
			if len(r.data) < 8 {
				t.Fatalf("%s: source %d delivered %d bytes", runner, id, len(r.data))
			}
			who := binary.LittleEndian.Uint64(r.data)
			if crc32.Checksum(r.data, srcstest.Castagnoli) != want[who] {
				t.Fatalf("%s: stream of sender %d corrupted", runner, who)
			}
			delete(want, who)
		}
		mu.Unlock()
		if len(want) != 0 {
			t.Fatalf("%s: %d senders never seen", runner, len(want))
		}
		if err := e.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-done
	})
}
