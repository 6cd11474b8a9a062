package engine_test

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// BenchmarkIdleSourceMemory reports what an idle source costs the engine
// process beyond the pool, per runner: Go heap and stacks, and goroutines.
// Idle sources hold no buffer, so this is the lane, the source's record,
// its account and its descriptor's wrappers. The resident set is left to
// `sluice-bench idle`, which holds 10,000 and 100,000 connections: at the
// 2,000 sources a benchmark can afford, the allocator's and the runtime's
// own growth swamp it.
func BenchmarkIdleSourceMemory(b *testing.B) {
	const n = 2000
	for _, runner := range []string{engine.RunnerURing, engine.RunnerEpoll, engine.RunnerGoroutine} {
		b.Run(runner, func(b *testing.B) {
			requireRunner(b, runner)
			b.Setenv(engine.EnvRunner, "")
			var heap, gs float64
			rounds := 0
			for b.Loop() {
				h, g := idleSourceCost(b, runner, n)
				heap, gs = heap+h, gs+g
				rounds++
			}
			b.ReportMetric(heap/float64(rounds), "heap-B/source")
			b.ReportMetric(gs/float64(rounds), "goroutines/source")
		})
	}
}

func idleSourceCost(b *testing.B, runner string, n int) (heap, goroutines float64) {
	e, err := engine.New(engine.Config{Runner: runner, Workers: 1, Buffers: 64, BufSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	peers := make([]int, 0, n)
	defer func() {
		for _, fd := range peers {
			unix.Close(fd)
		}
	}()
	conns := make([]net.Conn, 0, n)
	for range n {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		peers = append(peers, fds[1])
		f := os.NewFile(uintptr(fds[0]), "idle")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	b.StopTimer()
	before, g0 := memNow()
	b.StartTimer()
	for _, c := range conns {
		if _, err := e.AddSource(srcs.NewConn(c)); err != nil {
			b.Fatal(err)
		}
	}
	conns = nil
	deadline := time.Now().Add(30 * time.Second)
	for {
		running := e.CountSources()[engine.Running]
		if running == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d sources running", running, n)
		}
		time.Sleep(time.Millisecond)
	}
	// Opens run on goroutines of their own that end just after the source
	// runs: count what stays.
	for prev := -1; ; time.Sleep(10 * time.Millisecond) {
		g := runtime.NumGoroutine()
		if g == prev || time.Now().After(deadline) {
			break
		}
		prev = g
	}
	b.StopTimer()
	after, g1 := memNow()
	b.StartTimer()
	return float64(after-before) / float64(n), float64(g1-g0) / float64(n)
}

// memNow returns the Go heap and stacks in use and the number of
// goroutines, after a collection.
func memNow() (goMem int64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse), runtime.NumGoroutine()
}
