package fallback_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// benchCounter is the cheapest consumer: it counts bytes and releases each
// buffer at once, so a benchmark measures the runner, not the consumer.
type benchCounter struct {
	bytes    atomic.Int64
	finished chan error
}

func (c *benchCounter) Emit(l *srcs.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	c.bytes.Add(int64(n))
	b.Release()
}

func (c *benchCounter) Finish(l *srcs.Lane, err error) { c.finished <- err }

func BenchmarkGoroutine(b *testing.B) { benchOneLane(b, suiteCase{newRunner: newGoroutine}) }

func BenchmarkGoroutineRawConn(b *testing.B) {
	benchOneLane(b, suiteCase{newRunner: newGoroutine, wrap: rawConnSource})
}

func BenchmarkThread(b *testing.B) { benchOneLane(b, suiteCase{newRunner: newThread}) }

// benchOneLane pushes bytes through one lane backed by a unix socketpair:
// each iteration writes one 64 KiB piece, which the runner reads into
// 64 KiB pool buffers on its own goroutine or thread.
func benchOneLane(b *testing.B, sc suiteCase) {
	const piece = 64 << 10
	p, err := pool.New(pool.Config{BufSize: piece, Buffers: 64})
	if err != nil {
		b.Fatal(err)
	}
	r, err := sc.newRunner(srcs.RunnerConfig{Pool: p})
	if err != nil {
		b.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		b.Fatal(os.NewSyscallError("socketpair", err))
	}
	f := os.NewFile(uintptr(fds[0]), "socketpair")
	c, err := net.FileConn(f) // dups the descriptor
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	var src srcs.Source = srcs.NewConn(c)
	if sc.wrap != nil {
		src = sc.wrap(c)
	}
	out := &benchCounter{finished: make(chan error, 1)}
	l := &srcs.Lane{ID: 1, Src: src, Account: p.Join(1), Flush: time.Millisecond, Out: out}
	if err := r.Add(l); err != nil {
		b.Fatal(err)
	}
	wr := fds[1]
	data := make([]byte, piece)
	var sent int64
	b.SetBytes(piece)
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < piece; {
			n, err := unix.Write(wr, data[off:])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			off += n
		}
		sent += piece
	}
	b.StopTimer()
	unix.Close(wr)
	if err := <-out.finished; !errors.Is(err, io.EOF) {
		b.Errorf("lane finished with %v", err)
	}
	st := r.Stats()
	if err := r.Close(); err != nil {
		b.Error(err)
	}
	src.Close()
	l.Account.Leave()
	if got := out.bytes.Load(); got != sent {
		b.Errorf("received %d bytes, sent %d", got, sent)
	}
	if err := p.Close(); err != nil {
		b.Error(err)
	}
	b.ReportMetric(float64(st.Reads)/float64(b.N), "reads/op")
}
