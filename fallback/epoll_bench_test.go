//go:build linux

package fallback_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// epCounter is the cheapest consumer: it counts bytes and releases each
// buffer at once, so the benchmark measures the runner.
type epCounter struct {
	bytes    atomic.Int64
	finished chan error
}

func (c *epCounter) Emit(l *srcs.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	c.bytes.Add(int64(n))
	b.Release()
}

func (c *epCounter) Finish(l *srcs.Lane, err error) { c.finished <- err }

// BenchmarkEpoll pushes bytes through socketpair-backed lanes: each
// iteration writes one 64 KiB piece to the next lane, round-robin.
func BenchmarkEpoll(b *testing.B) {
	for _, lanes := range []int{1, 100} {
		b.Run(fmt.Sprintf("lanes=%d", lanes), func(b *testing.B) { benchEpoll(b, lanes) })
	}
}

func benchEpoll(b *testing.B, lanes int) {
	const piece = 64 << 10
	p, err := pool.New(pool.Config{BufSize: 64 << 10, Buffers: 256})
	if err != nil {
		b.Fatal(err)
	}
	r, err := fallback.NewEpoll(srcs.RunnerConfig{Workers: 1, Pool: p})
	if err != nil {
		b.Fatal(err)
	}
	out := &epCounter{finished: make(chan error, lanes)}
	writers := make([]int, lanes)
	var srcList []*epFD
	for i := range writers {
		rd, wr := epSocketpair(b, unix.SOCK_STREAM)
		writers[i] = wr
		src := &epFD{fd: rd, kind: srcs.Stream}
		srcList = append(srcList, src)
		l := &srcs.Lane{ID: srcs.ID(i + 1), Src: src, Account: p.Join(srcs.ID(i + 1)), Flush: time.Millisecond, Out: out}
		if err := r.Add(l); err != nil {
			b.Fatal(err)
		}
	}
	data := make([]byte, piece)
	var sent int64
	b.SetBytes(piece)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		fd := writers[i%lanes]
		i++
		for off := 0; off < piece; {
			n, err := unix.Write(fd, data[off:])
			if err != nil {
				b.Fatal(err)
			}
			off += n
		}
		sent += piece
	}
	b.StopTimer()
	for _, fd := range writers {
		unix.Close(fd)
	}
	for range lanes {
		if err := <-out.finished; err.Error() != "EOF" {
			b.Errorf("lane finished with %v", err)
		}
	}
	st := r.Stats()
	if err := r.Close(); err != nil {
		b.Error(err)
	}
	for _, s := range srcList {
		s.Close()
	}
	if got := out.bytes.Load(); got != sent {
		b.Errorf("received %d bytes, sent %d", got, sent)
	}
	if err := p.Close(); err != nil {
		b.Error(err)
	}
	b.ReportMetric(float64(st.Reads)/float64(b.N), "reads/op")
	b.ReportMetric(float64(st.Waits)/float64(b.N), "waits/op")
}
