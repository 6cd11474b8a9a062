package engine_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

func init() { faultChildren["emfile"] = faultChildEMFILE }

// TestFaultEMFILE runs each runner out of descriptors for real, in a child
// whose RLIMIT_NOFILE leaves room for fewer connections than its clients
// open: the listener (or the engine, for a connection it accepted but
// cannot yet hand to its runner) backs off and says so once, and when the
// clients close and descriptors come back every connection is served,
// byte-exact. No connection may be dropped for want of a descriptor.
func TestFaultEMFILE(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		runChild(t, childConfig{mode: "emfile", env: []string{faultRunnerEnv + "=" + runner}})
	})
}

// descriptorTrouble says whether a log record is about running out of
// descriptors.
func descriptorTrouble(r logRec) bool {
	return strings.Contains(r.attrs, "too many open files")
}

func faultChildEMFILE(t *testing.T) {
	const (
		conns = 200
		spare = 24 // descriptors left free: a handful of connections' worth
	)
	runner := os.Getenv(faultRunnerEnv)
	tap := newLogTap()
	log := slog.New(tap)
	col := newCollector(t)
	// No file tables: the uring runner's connections would otherwise
	// give their descriptors back as they come in (TestDirectFiles).
	e, err := engine.New(engine.Config{Runner: runner, Workers: 2, Buffers: 64, BufSize: 16 << 10, FileSlots: -1},
		engine.WithErrorHandler(col.onError), engine.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); col.run(e) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
		col.check()
	}()
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{Logger: log})
	if err != nil {
		t.Fatal(err)
	}

	// Every client connects before the limit drops; the kernel completes
	// the handshakes into the listener's backlog.
	clients := make([]net.Conn, conns)
	names := make([]string, conns)
	for i := range clients {
		clients[i], names[i] = dialTagged(t, ln.Addr().String(), nil)
	}
	closeClients := sync.OnceFunc(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	defer closeClients()

	limitFDs(t, spare)
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	first := tap.waitFor(t, "running out of descriptors", 20*time.Second, descriptorTrouble)
	t.Logf("%s: logged: %s", runner, first)
	st := e.Stats()
	if len(st.Sources) >= conns {
		t.Fatalf("%s: %d sources under a limit that leaves room for %d descriptors", runner, len(st.Sources), spare)
	}
	t.Logf("%s: out of descriptors with %d of %d connections taken in", runner, len(st.Sources), conns)

	// The clients send, then close: their descriptors, and those of the
	// sources they end, come back.
	want := make([]sent, conns)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 99))
			p := make([]byte, 1+r.IntN(48<<10))
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			if _, err := c.Write(p); err != nil {
				t.Errorf("client %d: %v", i, err)
			}
			want[i] = sent{bytes: int64(len(p)), crc: crc32.Checksum(p, srcstest.Castagnoli)}
			c.Close()
		})
	}
	wg.Wait()
	col.waitFor(fmt.Sprintf("the end of %d streams", conns), 60*time.Second, func(m map[string]*stream) bool {
		for _, name := range names {
			if s := m[name]; s == nil || !s.eos {
				return false
			}
		}
		return true
	})
	lost := 0
	for i, name := range names {
		got := col.get(name)
		if got.bytes != want[i].bytes || got.crc != want[i].crc || len(got.errs) != 0 {
			lost++
			if lost <= 5 {
				t.Errorf("%s: %s: got %d bytes crc %08x errors %v; sent %d bytes crc %08x",
					runner, name, got.bytes, got.crc, got.errs, want[i].bytes, want[i].crc)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%s: %d of %d connections lost bytes", runner, lost, conns)
	}
	// Each component that ran short says so once at Warn; it may repeat
	// at Debug while the shortage lasts.
	warned := map[string]int{}
	for _, r := range tap.matching(descriptorTrouble) {
		if r.level >= slog.LevelWarn {
			warned[r.msg]++
		}
	}
	all := len(tap.matching(descriptorTrouble))
	for msg, n := range warned {
		if n != 1 {
			t.Errorf("%s: %q logged %d times at Warn during one shortage, want once", runner, msg, n)
		}
	}
	if len(warned) == 0 {
		t.Errorf("%s: nothing said at Warn about running out of descriptors", runner)
	}
	t.Logf("%s: warnings %v; %d records about descriptors in all; every one of %d connections byte-exact: %v",
		runner, warned, all, conns, lost == 0)
}

// limitFDs lowers RLIMIT_NOFILE so that the process can open only about
// n more descriptors: the limit bounds descriptor numbers, and new ones
// take the lowest free number.
func limitFDs(t *testing.T, n int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, ent := range ents {
		var fd int
		if _, err := fmt.Sscan(ent.Name(), &fd); err == nil {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	limit := len(fds) + n
	if top := fds[len(fds)-1]; top >= limit {
		limit = top + 1
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(limit), Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
	t.Logf("RLIMIT_NOFILE %d with %d descriptors open", limit, len(fds))
}
