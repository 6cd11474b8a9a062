package engine_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestFaultUDPFlood floods a UDP source, as fast as a loop can send, with
// datagrams of three kinds: valid ones (within the source's MaxDatagram),
// ones above MaxDatagram that still fit a buffer (delivered whole when
// they happen to fit the room left, else dropped), and ones larger than a
// buffer (always dropped). Every datagram is accounted for: delivered
// whole and in order, counted in SourceStats.DatagramsTooLarge (and
// reported), or dropped by the kernel (SourceStats.KernelDrops). None is
// delivered cut, and the source keeps running.
func TestFaultUDPFlood(t *testing.T) {
	const (
		bufSize  = 4096
		maxDgram = 1400
		count    = 4000
	)
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		var mu sync.Mutex
		var got [][]byte
		var reported int
		var bad []string
		e, err := engine.New(engine.Config{Runner: runner, Workers: 1, Buffers: 64, BufSize: bufSize, Flush: time.Millisecond},
			engine.WithErrorHandler(func(err error) {
				mu.Lock()
				defer mu.Unlock()
				if !errors.Is(err, srcs.ErrDatagramTooLarge) {
					bad = append(bad, "unexpected error: "+err.Error())
				}
				reported++
			}))
		if err != nil {
			t.Fatal(err)
		}
		src, err := srcs.ListenUDP(srcs.UDPConfig{Addr: "127.0.0.1:0", ReadBuffer: 4 << 20, MaxDatagram: maxDgram})
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.AddSource(src)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			pullAll(e, func(c engine.Chunk) {
				if c.Flags&srcs.EndOfStream != 0 {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if err := srcs.ForEachDatagram(c.Data, func(p []byte) bool {
					got = append(got, bytes.Clone(p))
					return true
				}); err != nil {
					bad = append(bad, err.Error())
				}
			})
		}()
		defer func() {
			if err := e.Shutdown(t.Context()); err != nil {
				t.Error(err)
			}
			<-done
		}()
		stats := func() engine.SourceStats {
			for _, s := range e.Stats().Sources {
				if s.ID == id {
					return s
				}
			}
			t.Fatalf("%s: the UDP source is gone", runner)
			return engine.SourceStats{}
		}

		conn, err := net.Dial("udp", src.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r := rand.New(rand.NewPCG(11, 12))
		rnd := rand.NewChaCha8([32]byte{11})
		sent := make([][]byte, 0, count)
		var valid, mid, over int
		for range count {
			var n int
			switch k := r.IntN(10); {
			case k < 7:
				n, valid = 1+r.IntN(maxDgram), valid+1
			case k < 8:
				n, mid = maxDgram+1+r.IntN(bufSize-srcs.DatagramHeaderLen-maxDgram), mid+1
			default:
				n, over = bufSize+1+r.IntN(9000-bufSize), over+1
			}
			d := make([]byte, n)
			rnd.Read(d)
			sent = append(sent, d)
			if _, err := conn.Write(d); err != nil {
				t.Fatal(err)
			}
		}
		accounted := func() int {
			s := stats()
			mu.Lock()
			defer mu.Unlock()
			return len(got) + int(s.DatagramsTooLarge+s.KernelDrops)
		}
		waitUntil(t, "every datagram accounted for", func() bool { return accounted() >= count })

		// The source still runs: one more valid datagram arrives.
		last := []byte("after the flood")
		if _, err := conn.Write(last); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the datagram after the flood", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) > 0 && bytes.Equal(got[len(got)-1], last)
		})

		st := stats()
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bad {
			t.Error(b)
		}
		delivered := got[:len(got)-1]
		// Delivered datagrams are whole, in the order sent.
		j := 0
		for _, d := range delivered {
			for j < len(sent) && !bytes.Equal(sent[j], d) {
				j++
			}
			if j == len(sent) {
				t.Fatalf("%s: a delivered datagram of %d bytes is cut, corrupted or out of order", runner, len(d))
			}
			if len(d) > bufSize {
				t.Fatalf("%s: a %d-byte datagram delivered from %d-byte buffers", runner, len(d), bufSize)
			}
			j++
		}
		if n := len(delivered) + int(st.DatagramsTooLarge+st.KernelDrops); n != count {
			t.Errorf("%s: %d delivered + %d too large + %d dropped by the kernel = %d, sent %d",
				runner, len(delivered), st.DatagramsTooLarge, st.KernelDrops, n, count)
		}
		if int(st.DatagramsTooLarge) < over-int(st.KernelDrops) {
			t.Errorf("%s: %d datagrams larger than a buffer sent, %d dropped by the kernel, but only %d counted too large",
				runner, over, st.KernelDrops, st.DatagramsTooLarge)
		}
		if reported != int(st.DatagramsTooLarge) {
			t.Errorf("%s: %d drops reported to the error handler, %d counted", runner, reported, st.DatagramsTooLarge)
		}
		t.Logf("%s: sent %d valid, %d above MaxDatagram %d, %d above the %d-byte buffer; delivered %d whole, %d too large (reported), %d dropped by the kernel",
			runner, valid, mid, maxDgram, over, bufSize, len(delivered), st.DatagramsTooLarge, st.KernelDrops)
	})
}
