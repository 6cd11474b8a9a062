package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// logTap is a slog.Handler that keeps every record, so a test can check
// what the engine and its listeners said, and how often.
type logTap struct {
	mu      sync.Mutex
	recs    []logRec
	changed chan struct{}
}

type logRec struct {
	level slog.Level
	msg   string
	attrs string
}

func (r logRec) String() string { return r.level.String() + " " + r.msg + " " + r.attrs }

func newLogTap() *logTap { return &logTap{changed: make(chan struct{}, 1)} }

func (h *logTap) Enabled(context.Context, slog.Level) bool { return true }
func (h *logTap) Handle(_ context.Context, r slog.Record) error {
	var attrs []string
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a.String())
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, logRec{r.Level, r.Message, strings.Join(attrs, " ")})
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
	return nil
}
func (h *logTap) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logTap) WithGroup(string) slog.Handler      { return h }

// matching returns the records for which keep holds.
func (h *logTap) matching(keep func(logRec) bool) []logRec {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRec
	for _, r := range h.recs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// waitFor waits until a record satisfies keep, and returns it.
func (h *logTap) waitFor(t *testing.T, what string, timeout time.Duration, keep func(logRec) bool) logRec {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if rs := h.matching(keep); len(rs) > 0 {
			return rs[0]
		}
		select {
		case <-h.changed:
		case <-deadline.C:
			t.Fatalf("no log record of %s within %v", what, timeout)
		}
	}
}

// rssBytes reads the process's resident set size.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// raiseNofile makes room for n more descriptors if it can, raising the
// hard limit too when the process may, and returns how many more it may
// open. The old limit comes back at cleanup.
func raiseNofile(t *testing.T, n int) int {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	used := openFDs(t)
	want := uint64(used + n + 256)
	if old.Cur >= want {
		return n
	}
	lim := unix.Rlimit{Cur: want, Max: max(old.Max, want)}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		lim = unix.Rlimit{Cur: old.Max, Max: old.Max}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	})
	return min(n, int(lim.Cur)-used-256)
}

// waitCount polls f until it is at most want, or fails the test saying
// what stayed above it.
func waitCount(t *testing.T, what string, want int, f func() int) {
	t.Helper()
	waitCountFor(t, 10*time.Second, what, want, f)
}

func waitCountFor(t *testing.T, timeout time.Duration, what string, want int, f func() int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := f()
		if got <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want at most %d, %v on", what, got, want, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startEngine starts an engine in pull mode with a collector, logging to
// tap; cleanup shuts it down and checks the collector.
func startEngine(t *testing.T, cfg engine.Config, tap *logTap) (*engine.Engine, *collector) {
	t.Helper()
	col := newCollector(t)
	e, err := engine.New(cfg, engine.WithErrorHandler(col.onError), engine.WithLogger(slog.New(tap)))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, e: e, col: col, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		col.run(e)
	}()
	t.Cleanup(h.shutdown)
	return e, col
}

// checkStreams sends n TCP streams of random sizes up to max bytes through
// a listener added to e, and requires each to arrive byte-exact.
func checkStreams(t *testing.T, e *engine.Engine, col *collector, n, max int) {
	t.Helper()
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	runSenders(t, &harness{t: t, e: e, col: col, addr: ln.Addr().String()}, n, max)
}

// checkFile reads a file of size random bytes through e and requires it
// byte-exact.
func checkFile(t *testing.T, e *engine.Engine, col *collector, size int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(data)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := srcs.NewFile(srcs.FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddSource(src); err != nil {
		t.Fatal(err)
	}
	col.waitFor("the end of the file", 60*time.Second, func(m map[string]*stream) bool {
		s := m[path]
		return s != nil && s.eos
	})
	got := col.get(path)
	if want := crc32.Checksum(data, srcstest.Castagnoli); got.bytes != int64(size) || got.crc != want || len(got.errs) != 0 {
		t.Fatalf("file: %d bytes crc %08x errors %v; want %d crc %08x", got.bytes, got.crc, got.errs, size, want)
	}
}

// checkNewlineStream runs an engine with cfg and a newline-framed
// listener, sends it about size bytes of lines written in pieces cut
// anywhere, and requires them byte-exact in chunks of whole lines.
func checkNewlineStream(t *testing.T, cfg engine.Config, tap *logTap, size int) {
	t.Helper()
	e, addr := enginetest.Listen(t, cfg, srcs.ListenerConfig{Framer: srcs.Newline{}}, []engine.Option{engine.WithLogger(slog.New(tap))})
	var (
		got    sent
		chunks int
		bad    error
		ended  = make(chan struct{})
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		pullAll(e, func(ch engine.Chunk) {
			switch {
			case ch.Flags&srcs.EndOfStream != 0:
				close(ended)
				return
			case ch.Flags&srcs.Records == 0 || len(ch.Data) == 0 || ch.Data[len(ch.Data)-1] != '\n':
				bad = fmt.Errorf("chunk %d of %d bytes, flags %v: not whole lines", ch.Seq, len(ch.Data), ch.Flags)
			}
			chunks++
			got.bytes += int64(len(ch.Data))
			got.crc = crc32.Update(got.crc, srcstest.Castagnoli, ch.Data)
		})
	}()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	var text bytes.Buffer
	for text.Len() < size {
		for range r.IntN(2000) {
			text.WriteByte('a' + byte(r.IntN(26)))
		}
		text.WriteByte('\n')
	}
	data := text.Bytes()
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+r.IntN(9000))
		if _, err := c.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	c.Close()
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		t.Fatal("the framed stream never ended")
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
	if bad != nil {
		t.Fatal(bad)
	}
	if want := crc32.Checksum(data, srcstest.Castagnoli); got.bytes != int64(len(data)) || got.crc != want {
		t.Fatalf("framed: %d bytes crc %08x; want %d crc %08x", got.bytes, got.crc, len(data), want)
	}
	t.Logf("framed: %d bytes in %d chunks of whole lines", got.bytes, chunks)
}
