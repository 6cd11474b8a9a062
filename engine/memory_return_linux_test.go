package engine_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestPoolReturnsMemory: after a burst that touched the whole pool, an
// engine with no buffer held gives the pool's pages back once they stayed
// free for PoolReturnAfter: the pool's mapping, resident after the burst,
// is resident no more.
func TestPoolReturnsMemory(t *testing.T) {
	const bufs, size = 512, 64 << 10
	const slab = bufs * size
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Buffers: bufs, BufSize: size, MaxPerSource: bufs,
		QueueHigh: bufs, QueueLow: bufs - 1, PoolReturnAfter: 100 * time.Millisecond,
		Flush: time.Minute}) // full chunks only: the burst fills every buffer
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	// The burst: a pool's worth, held by the consumer until all of it
	// has arrived, so that every buffer is written.
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		c.Write(make([]byte, slab))
		c.Close()
	}()
	var held []engine.Chunk
	got := 0
	for got < slab {
		c, err := e.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got += len(c.Data)
		held = append(held, c)
	}
	before := poolRSS(t, e)
	if st := e.Pool().Stats(); st.Resident < bufs*3/4 {
		t.Fatalf("the burst made %d buffers resident, want most of %d", st.Resident, bufs)
	}
	for i := range held {
		held[i].Release()
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Pool().Stats().Resident > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool's pages never went back: %+v", e.Pool().Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := poolRSS(t, e)
	t.Logf("the pool's resident memory: %d MiB after the burst, %d MiB once its pages went back", before>>20, after>>20)
	if before < slab*3/4 || after > slab/8 {
		t.Errorf("the pool's resident memory: %d KiB after the burst, %d KiB once its pages went back; its slab is %d KiB", before>>10, after>>10, slab>>10)
	}
}

// poolRSS returns the resident memory of the mapping that holds e's
// pool, from /proc/self/smaps: the process's whole resident set moves
// with the runtime's own memory (the race detector's most of all).
func poolRSS(t *testing.T, e *engine.Engine) int64 {
	t.Helper()
	addr, err := strconv.ParseUint(strings.TrimPrefix(fmt.Sprintf("%p", e.Pool().Iovecs()[0].Base), "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = l <= addr && addr < h
				continue
			}
		}
		if in && f[0] == "Rss:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping holds the pool at %#x", addr)
	return 0
}
