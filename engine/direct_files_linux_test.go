package engine_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

func init() { faultChildren["direct"] = faultChildDirectFiles }

// TestDirectFiles holds more connections under the uring runner than the
// process has descriptors left: each accepted socket moves into a
// worker's registered file table (engine.Config.FileSlots) and gives its
// descriptor back. In a child whose RLIMIT_NOFILE leaves room for 24
// more descriptors, 300 connections are accepted and held at once, every
// one's bytes arrive exact, and when the engine shuts down it closes
// every socket it took: each client reads the end.
func TestDirectFiles(t *testing.T) {
	requireRunner(t, engine.RunnerURing)
	runChild(t, childConfig{mode: "direct"})
}

func faultChildDirectFiles(t *testing.T) {
	const (
		conns = 300
		spare = 24
	)
	tap := newLogTap()
	col := newCollector(t)
	e, err := engine.New(engine.Config{Runner: engine.RunnerURing, Workers: 2, Buffers: 64, BufSize: 16 << 10},
		engine.WithErrorHandler(col.onError), engine.WithLogger(slog.New(tap)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); col.run(e) }()
	shut := sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	})
	defer shut()
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	clients := make([]*net.TCPConn, conns)
	names := make([]string, conns)
	for i := range clients {
		clients[i], names[i] = dialTagged(t, ln.Addr().String(), nil)
		defer clients[i].Close()
	}
	limitFDs(t, spare)
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	direct := 0
	for ; direct < conns; time.Sleep(10 * time.Millisecond) {
		direct = 0
		for _, rs := range e.Stats().Runners {
			direct += rs.DirectFiles
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections in the workers' file tables after 30s", direct, conns)
		}
	}
	t.Logf("%d connections held with %d descriptors to spare", direct, spare)

	// Every connection sends while all are held, and the first half
	// closes: those end by the peer, the rest by the shutdown.
	want := make([]sent, conns)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			p := make([]byte, 1+r.IntN(40<<10))
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			if _, err := c.Write(p); err != nil {
				t.Errorf("client %d: %v", i, err)
			}
			want[i] = sent{bytes: int64(len(p)), crc: crc32.Checksum(p, srcstest.Castagnoli)}
			if i < conns/2 {
				c.CloseWrite()
			}
		})
	}
	wg.Wait()
	col.waitFor(fmt.Sprintf("every byte of %d streams", conns), 60*time.Second, func(m map[string]*stream) bool {
		for i, name := range names {
			if s := m[name]; s == nil || s.bytes != want[i].bytes || i < conns/2 && !s.eos {
				return false
			}
		}
		return true
	})
	shut()
	for i, name := range names {
		got := col.get(name)
		if got.bytes != want[i].bytes || got.crc != want[i].crc || len(got.errs) != 0 || !got.eos {
			t.Errorf("%s: got %d bytes crc %08x errors %v end %v; sent %d bytes crc %08x",
				name, got.bytes, got.crc, got.errs, got.eos, want[i].bytes, want[i].crc)
		}
	}
	// The engine closed the sockets it held: each client reads their end.
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("client %d: read after the engine shut down: %v, want the end", i, err)
		}
	}
	for _, rs := range e.Stats().Runners {
		if rs.DirectFiles != 0 {
			t.Errorf("%d connections still in file tables after shutdown", rs.DirectFiles)
		}
	}
	if recs := tap.matching(descriptorTrouble); len(recs) > 0 {
		t.Logf("the listener ran short of descriptors %d times while accepting (it backs off): %v", len(recs), recs[0])
	}
}

// TestDirectFilesFull fills a one-slot file table: the connection that
// finds its worker's table full keeps its descriptor, and every
// connection's bytes arrive exact either way; a slot given back by a
// connection that ended serves a later one.
func TestDirectFilesFull(t *testing.T) {
	requireRunner(t, engine.RunnerURing)
	h := newHarness(t, engine.RunnerURing, engine.Config{Workers: 1, Buffers: 16, BufSize: 16 << 10, FileSlots: 1})
	e, col := h.e, h.col
	directFiles := func() int {
		n := 0
		for _, rs := range e.Stats().Runners {
			n += rs.DirectFiles
		}
		return n
	}
	send := func(c *net.TCPConn, i int) sent {
		p := make([]byte, 1000+i*7000)
		for j := range p {
			p[j] = byte(i*31 + j)
		}
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		return sent{bytes: int64(len(p)), crc: crc32.Checksum(p, srcstest.Castagnoli)}
	}
	check := func(name string, w sent, end bool) {
		t.Helper()
		col.waitFor(name, 20*time.Second, func(m map[string]*stream) bool {
			s := m[name]
			return s != nil && s.bytes >= w.bytes && (!end || s.eos)
		})
		if got := col.get(name); got.bytes != w.bytes || got.crc != w.crc || len(got.errs) != 0 {
			t.Errorf("%s: got %d bytes crc %08x errors %v; sent %d crc %08x", name, got.bytes, got.crc, got.errs, w.bytes, w.crc)
		}
	}
	// Connections are accepted on the ring, by up to 16 armed accepts of
	// which one at a time holds the slot: which connection lands in the
	// table is up to the order the kernel serves them in, but one of the
	// first 17 must, and never more than one.
	type conn struct {
		c    *net.TCPConn
		name string
		sent sent
	}
	var open []conn
	fill := func(phase string) {
		t.Helper()
		for i := 0; directFiles() == 0; i++ {
			if i == 17 {
				accepted, direct := runnerStats(e)
				t.Fatalf("%s: no connection in the one-slot table after %d; the runner accepted %d (%d direct)", phase, i, accepted, direct)
			}
			c, name := h.dial()
			w := send(c, len(open))
			check(name, w, false)
			open = append(open, conn{c, name, w})
			if n := directFiles(); n > 1 {
				t.Fatalf("%s: %d connections in a one-slot table", phase, n)
			}
		}
	}
	closeAll := func() {
		t.Helper()
		for _, oc := range open {
			oc.c.Close()
			check(oc.name, oc.sent, true)
		}
		open = open[:0]
	}
	fill("first connections")
	// Every connection ends; the slot comes back, and a later connection
	// takes it.
	closeAll()
	for deadline := time.Now().Add(10 * time.Second); directFiles() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			accepted, direct := runnerStats(e)
			t.Fatalf("the ended connection's slot still held: %d in the table; the runner accepted %d", direct, accepted)
		}
	}
	fill("after the slot came back")
	closeAll()
}
