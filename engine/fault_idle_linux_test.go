package engine_test

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// bulkBlock is the random block bulk senders repeat.
var bulkBlock = sync.OnceValue(func() []byte {
	b := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{9}).Read(b)
	return b
})

// bulk sends total bytes (whole repeats of bulkBlock) on a fresh connection
// to h as fast as it can, waits for the stream's end, checks it
// byte-exact, and returns the rate from the first write to the end.
func bulk(t *testing.T, h *harness, total int) float64 {
	t.Helper()
	c, name := h.dial()
	var w sent
	block := bulkBlock()
	start := time.Now()
	for w.bytes < int64(total) {
		if _, err := c.Write(block); err != nil {
			t.Fatal(err)
		}
		w.bytes += int64(len(block))
		w.crc = crc32.Update(w.crc, srcstest.Castagnoli, block)
	}
	c.Close()
	got := h.col.waitEnd(name, 120*time.Second)
	el := time.Since(start)
	if got.bytes != w.bytes || got.crc != w.crc || len(got.errs) != 0 {
		t.Fatalf("bulk: got %d bytes crc %08x errors %v; sent %d crc %08x", got.bytes, got.crc, got.errs, w.bytes, w.crc)
	}
	return float64(w.bytes) / el.Seconds()
}

// waitPoolIdle waits until no buffer is in use: every idle source holds
// none, and every chunk came home.
func waitPoolIdle(t *testing.T, e *engine.Engine, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.Pool().Stats()
		if st.InUse == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d buffers still in use after 10s", what, st.InUse)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFaultIdleCrowd opens 10,000 connections that never send a byte: they
// hold no pool buffer, and a bulk sender beside them still gets its bytes
// through. The bulk rate with and without the crowd is logged, not
// judged: these machines are shared and noisy.
func TestFaultIdleCrowd(t *testing.T) {
	const (
		crowd = 10000
		total = 64 << 20
	)
	forEachRunner(t, func(t *testing.T, runner string) {
		n := crowd
		if runner == engine.RunnerThread {
			// One OS thread per source: 10,000 would pass the runner's
			// default cap of 8,000 threads (and, under the race
			// detector, cost gigabytes).
			n = 1000
			t.Logf("%s: %d idle connections, not %d: one thread each", runner, n, crowd)
		}
		// Both ends of every connection live in this process.
		if fit := raiseNofile(t, 2*n) / 2; fit < n {
			t.Logf("%s: RLIMIT_NOFILE leaves room for %d idle connections, not %d", runner, fit, n)
			n = fit
		}
		h := newHarness(t, runner, engine.Config{Workers: 2, Buffers: 256, BufSize: 64 << 10})
		alone := bulk(t, h, total)
		waitPoolIdle(t, h.e, "after the bulk stream")

		start := time.Now()
		idle := make([]net.Conn, 0, n)
		defer func() {
			for _, c := range idle {
				c.Close()
			}
		}()
		for range n {
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatalf("%s: dialing idle connection %d: %v", runner, len(idle), err)
			}
			idle = append(idle, c)
		}
		waitCountFor(t, 60*time.Second, "idle connections not yet sources", 0, func() int { return n - len(h.e.Stats().Sources) })
		t.Logf("%s: %d idle connections up in %v", runner, n, time.Since(start).Round(time.Millisecond))
		waitPoolIdle(t, h.e, fmt.Sprintf("%d idle sources", n))

		crowded := bulk(t, h, total)
		st := h.e.Stats()
		held := 0
		for _, s := range st.Sources {
			held += s.Held
		}
		if held != 0 {
			t.Errorf("%s: %d idle sources hold %d buffers", runner, len(st.Sources), held)
		}
		waitPoolIdle(t, h.e, "after the bulk stream beside the crowd")
		t.Logf("%s: bulk %d MiB alone %.0f MiB/s, beside %d idle connections %.0f MiB/s (ratio %.2f); pool in use 0 throughout the idle phases",
			runner, total>>20, alone/(1<<20), n, crowded/(1<<20), crowded/alone)
	})
}
