//go:build linux

package ring

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// countEmitter counts bytes and releases every buffer at once: the fastest
// possible consumer, so benchmarks measure the runner. It allocates nothing.
type countEmitter struct {
	bytes    atomic.Int64
	chunks   atomic.Int64
	finished chan error
}

func (e *countEmitter) Emit(l *srcs.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	e.bytes.Add(int64(n))
	e.chunks.Add(1)
	b.Release()
}

func (e *countEmitter) Finish(l *srcs.Lane, err error) { e.finished <- err }

// benchRunner drives lanes socketpair-backed lanes; each iteration writes
// perLane bytes into every lane from the benchmark goroutine, in 64 KiB
// blocking writes, while the runner drains them.
func benchRunner(b *testing.B, lanes, workers, perLane int) {
	requireURing(b)
	p, err := pool.New(pool.Config{BufSize: 64 << 10, Buffers: 256})
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewRunner(srcs.RunnerConfig{Workers: workers, Pool: p})
	if err != nil {
		b.Fatal(err)
	}
	em := &countEmitter{finished: make(chan error, lanes)}
	writers := make([]int, lanes)
	srcList := make([]*fdSrc, lanes)
	for i := range lanes {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		writers[i] = fds[1]
		srcList[i] = &fdSrc{fd: fds[0], kind: srcs.Stream}
		l := &srcs.Lane{ID: srcs.ID(i + 1), Src: srcList[i], Account: p.Join(srcs.ID(i + 1)), Flush: time.Millisecond, Out: em}
		if err := r.Add(l); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(lanes * perLane))
	b.ReportAllocs()
	for b.Loop() {
		for _, fd := range writers {
			for left := perLane; left > 0; {
				n, err := unix.Write(fd, buf[:min(left, len(buf))])
				if err != nil {
					b.Fatal(err)
				}
				left -= n
			}
		}
	}
	for _, fd := range writers {
		unix.Close(fd)
	}
	for range lanes {
		if err := <-em.finished; err.Error() != "EOF" {
			b.Errorf("Finish(%v)", err)
		}
	}
	st := r.Stats()
	if err := r.Close(); err != nil {
		b.Error(err)
	}
	for _, s := range srcList {
		s.Close()
	}
	if err := p.Close(); err != nil {
		b.Error(err)
	}
	b.ReportMetric(float64(em.bytes.Load())/float64(max(st.Reads, 1)), "B/read")
	b.ReportMetric(float64(st.Reads)/float64(max(st.Waits, 1)), "reads/wait")
}

func BenchmarkRunnerOneLane(b *testing.B) { benchRunner(b, 1, 1, 1<<20) }

func BenchmarkRunner100Lanes(b *testing.B) { benchRunner(b, 100, 2, 16<<10) }
