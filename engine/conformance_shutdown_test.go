package engine_test

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/internal/synthetic"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/ring"
	"github.com/sluice-io/sluice/srcs"
)

// streamForever writes random bytes to c until it fails, then closes it.
func streamForever(c net.Conn, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, 8<<10)
	for {
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return
		}
	}
}

func TestConformanceStopWhilePaused(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		// Tiny watermarks: two undelivered chunks pause every read.
		h := newHarness(t, runner, engine.Config{Workers: 1, Buffers: 16, BufSize: 4 << 10,
			Flush: time.Millisecond, QueueHigh: 2, QueueLow: 1})
		// The consumer stops pulling, so undelivered chunks pile up past
		// the high watermark.
		h.col.setPulling(false)
		var conns []net.Conn
		var names []string
		for i := range 8 {
			c, name := h.dial()
			conns = append(conns, c)
			names = append(names, name)
			go streamForever(c, uint64(i))
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		waitPaused(t, h.e)
		// Stop one source while reads are paused: it must still end.
		var id srcs.ID
		waitSource(t, h.e, "tcp://"+conns[0].LocalAddr().String(), func(s engine.SourceStats) bool { id = s.ID; return true })
		if err := h.e.StopSource(id); err != nil {
			t.Fatal(err)
		}
		h.col.setPulling(true)
		h.col.waitFor("the stopped source's end", 30*time.Second, func(m map[string]*stream) bool {
			s := m[names[0]]
			return s != nil && s.eos
		})
		// Pause again, then shut everything down while paused.
		h.col.setPulling(false)
		waitPaused(t, h.e)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done <- h.e.Shutdown(ctx)
		}()
		h.col.setPulling(true) // shutdown waits for chunks to come home
		if err := <-done; err != nil {
			t.Fatalf("%s: shutdown while paused: %v", runner, err)
		}
	})
}

func waitPaused(t *testing.T, e *engine.Engine) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !e.Stats().Paused {
		if time.Now().After(deadline) {
			t.Fatal("the engine never paused")
		}
		time.Sleep(time.Millisecond)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestConformanceShutdownUnderTrafficLeavesNothing(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		fdsBefore := openFDs(t)
		col := newCollector(t)
		e, err := engine.New(engine.Config{Runner: runner, Workers: 2, Buffers: 64, BufSize: 16 << 10},
			engine.WithErrorHandler(col.onError))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		e.AddListener(ln)
		done := make(chan struct{})
		go func() { defer close(done); col.run(e) }()
		var conns []net.Conn
		var senders sync.WaitGroup
		for i := range 100 {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			senders.Go(func() { streamForever(c, uint64(i)) })
		}
		// Let traffic flow, then shut down in the middle of it.
		col.waitFor("traffic", 30*time.Second, func(m map[string]*stream) bool {
			var total int64
			for _, s := range m {
				total += s.bytes
			}
			return total > 8<<20
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Fatalf("%s: shutdown: %v", runner, err)
		}
		<-done
		for _, c := range conns {
			c.Close()
		}
		senders.Wait()
		col.check()
		if st := e.Pool().Stats(); st.InUse != 0 {
			t.Fatalf("%s: %d buffers still in use after shutdown", runner, st.InUse)
		}
		if after := openFDs(t); after != fdsBefore {
			t.Fatalf("%s: %d descriptors open before, %d after shutdown", runner, fdsBefore, after)
		}
		// Every stream ended with its end-of-stream chunk.
		col.mu.Lock()
		defer col.mu.Unlock()
		for name, s := range col.streams {
			if !s.eos {
				t.Errorf("%s: %s never ended", runner, name)
			}
		}
	})
}

// TestProcessingCannotStarveSources checks G2 one way: a processing stage
// with its own pool, which it keeps exhausted for a while, does not stop
// the sources from being served once it lets go, and never needs a source
// buffer to do so.
func TestProcessingCannotStarveSources(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		stage, err := pool.New(pool.Config{BufSize: 4 << 10, Buffers: 8, MaxPerSource: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := stage.Close(); err != nil {
				t.Error(err)
			}
		}()
		var (
			mu     sync.Mutex
			window []*pool.Buf // the stage's working set: it holds up to 8
			got    = map[srcs.ID]uint32{}
			ended  atomic.Int64
		)
		acct := stage.Join(1)
		defer acct.Leave()
		h := func(c engine.Chunk) {
			defer c.Release()
			if c.Flags&srcs.EndOfStream != 0 {
				ended.Add(1)
				return
			}
			// Copy into the stage's own memory, release the source chunk,
			// and keep the copy in a sliding window that fills the stage
			// pool completely.
			b, err := acct.Acquire(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			copy(b.Bytes(), c.Data[:min(len(c.Data), len(b.Bytes()))])
			mu.Lock()
			got[c.Source] = crc32.Update(got[c.Source], srcstest.Castagnoli, c.Data)
			window = append(window, b)
			var old *pool.Buf
			if len(window) == 8 {
				old, window = window[0], window[1:]
			}
			mu.Unlock()
			if old != nil {
				old.Release()
			}
		}
		e, err := engine.New(engine.Config{Runner: runner, Workers: 1, Buffers: 16, BufSize: 4 << 10, Handlers: 1},
			engine.WithHandler(h))
		if err != nil {
			t.Fatal(err)
		}
		const n = 50
		var want []sent
		for i := range n {
			s, err := synthetic.New(synthetic.Config{Total: 256 << 10, Seed: uint64(i)})
			if err != nil {
				t.Fatal(err)
			}
			bytes, crc := s.Digest()
			want = append(want, sent{bytes, crc})
			if _, err := e.AddSource(s); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for ended.Load() < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if ended.Load() < n {
			t.Fatalf("%s: only %d of %d sources ended: the stage starved them", runner, ended.Load(), n)
		}
		if err := e.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for _, b := range window {
			b.Release()
		}
		window = nil
		for id, w := range want {
			if got[srcs.ID(id)] != w.crc {
				t.Errorf("%s: source %d crc %08x, want %08x", runner, id, got[srcs.ID(id)], w.crc)
			}
		}
		mu.Unlock()
	})
}

// TestSourcesCannotStarveProcessing checks G2 the other way: with every
// source buffer held by unreleased chunks, a processing stage still gets
// all of its own buffers.
func TestSourcesCannotStarveProcessing(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	h := newHarness(t, engine.RunnerGoroutine, engine.Config{Buffers: 8, BufSize: 4 << 10, MaxPerSource: 8, Flush: time.Millisecond})
	h.col.setHold(true)
	c, _ := h.dial()
	go streamForever(c, 1)
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for h.e.Pool().Stats().Free != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the source pool never filled")
		}
		time.Sleep(time.Millisecond)
	}
	stage, err := pool.New(pool.Config{BufSize: 4 << 10, Buffers: 8, MaxPerSource: 8})
	if err != nil {
		t.Fatal(err)
	}
	acct := stage.Join(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var held []*pool.Buf
	for range 8 {
		b, err := acct.Acquire(ctx)
		if err != nil {
			t.Fatalf("the stage could not get its own buffer while sources held theirs: %v", err)
		}
		held = append(held, b)
	}
	for _, b := range held {
		b.Release()
	}
	acct.Leave()
	if err := stage.Close(); err != nil {
		t.Fatal(err)
	}
}

// fileSize is the size of the file the file conformance test reads.
const fileSize = 256 << 20

var bigFile = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sluice-file-test")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "data")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r := rand.NewChaCha8([32]byte{1})
	if _, err := io.CopyN(f, r, fileSize); err != nil {
		return "", err
	}
	return path, f.Close()
})

func TestConformanceFile(t *testing.T) {
	path, err := bigFile()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(path)) })
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := crc32.Checksum(data, srcstest.Castagnoli)
	data = nil
	forEachRunner(t, func(t *testing.T, runner string) {
		h := newHarness(t, runner, engine.Config{Workers: 1, Buffers: 64, BufSize: 256 << 10})
		src, err := srcs.NewFile(srcs.FileConfig{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.e.AddSource(src); err != nil {
			t.Fatal(err)
		}
		h.col.waitFor("the end of the file", 120*time.Second, func(m map[string]*stream) bool {
			s := m[path]
			return s != nil && s.eos
		})
		got := h.col.get(path)
		if got.bytes != fileSize || got.crc != want {
			t.Fatalf("%s: read %d bytes crc %08x, want %d crc %08x", runner, got.bytes, got.crc, fileSize, want)
		}
	})
}

func TestAutoPicksURingHere(t *testing.T) {
	requireRunner(t, engine.RunnerURing)
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if e.Runner() != engine.RunnerURing {
		t.Fatalf("auto chose %s on a kernel whose probe passes:\n%s", e.Runner(), ring.Probe())
	}
}

func TestEnvOverridesRunner(t *testing.T) {
	t.Setenv(engine.EnvRunner, engine.RunnerGoroutine)
	e, err := engine.New(engine.Config{Runner: engine.RunnerEpoll, Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if e.Runner() != engine.RunnerGoroutine {
		t.Fatalf("chose %s despite %s=goroutine", e.Runner(), engine.EnvRunner)
	}
}

func TestUnreachablePeerIsReported(t *testing.T) {
	t.Setenv(engine.EnvRunner, "")
	// A free port: listen, note it, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	errs := make(chan error, 16)
	e, err := engine.New(engine.Config{Buffers: 16}, engine.WithErrorHandler(func(err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	client, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: addr, Backoff: srcs.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.AddSource(client)
	if err != nil {
		t.Fatal(err)
	}
	// Errors travel behind the source's data, so they reach the handler
	// as the consumer pulls.
	chunks := make(chan engine.Chunk, 1)
	go func() {
		ch, err := e.Next(context.Background())
		if err == nil {
			chunks <- ch
		}
		close(chunks)
	}()
	for i := range 3 {
		select {
		case err := <-errs:
			var se *srcs.SourceError
			if !errors.As(err, &se) || se.ID != id || se.Op != "open" {
				t.Fatalf("error %d: %v; want an open error naming source %d", i, err, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 3 open failures reported", i)
		}
	}
	// After its attempts the source fails for good and ends.
	ch, ok := <-chunks
	if !ok || ch.Flags&srcs.EndOfStream == 0 || ch.Source != id {
		t.Fatalf("after the last attempt: chunk %+v; want the end of source %d", ch, id)
	}
	ch.Release()
}
