package runnertest

import (
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// Counter is the cheapest emitter: it counts bytes and chunks and releases
// each buffer at once, so that a benchmark measures the runner, not the
// consumer. It allocates nothing. Finished gets each lane's Finish error;
// make it with room for every lane (NewCounter).
type Counter struct {
	Bytes    atomic.Int64
	Chunks   atomic.Int64
	Finished chan error
}

// NewCounter returns a Counter for up to lanes lanes.
func NewCounter(lanes int) *Counter { return &Counter{Finished: make(chan error, lanes)} }

func (c *Counter) Emit(l *contract.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	c.Bytes.Add(int64(n))
	c.Chunks.Add(1)
	b.Release()
}

func (c *Counter) Finish(l *contract.Lane, err error) { c.Finished <- err }

// BenchConfig says what Bench drives.
type BenchConfig struct {
	Lanes   int
	Workers int // where the runner has workers
	// PerLane is how many bytes each iteration writes into every lane.
	PerLane int
	// Source makes a lane's source from the reading end of a unix stream
	// socketpair, and owns it from then on; nil means an FDSource.
	Source func(fd int) (srcs.Source, error)
}

// Bench pushes bytes through lanes over unix stream socketpairs: each
// iteration writes PerLane bytes into every lane from the benchmark's
// goroutine, in blocking writes of at most 64 KiB, while the runner drains
// them into 64 KiB pool buffers with a 1 ms flush timeout. It reports bytes
// per read and reads per wait.
func Bench(b *testing.B, newRunner New, cfg BenchConfig) {
	p, err := pool.New(pool.Config{BufSize: 64 << 10, Buffers: 256})
	if err != nil {
		b.Fatal(err)
	}
	r, err := newRunner(contract.RunnerConfig{Workers: cfg.Workers, Pool: p})
	if errors.Is(err, errors.ErrUnsupported) {
		p.Close()
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	out := NewCounter(cfg.Lanes)
	writers := make([]int, cfg.Lanes)
	sources := make([]srcs.Source, cfg.Lanes)
	lanes := make([]*contract.Lane, cfg.Lanes)
	for i := range cfg.Lanes {
		rd, wr := Socketpair(b, unix.SOCK_STREAM)
		writers[i] = wr
		var src srcs.Source = &FDSource{FD: rd, Kind: contract.Stream}
		if cfg.Source != nil {
			if src, err = cfg.Source(rd); err != nil {
				b.Fatal(err)
			}
		}
		sources[i] = src
		id := srcs.ID(i + 1)
		lanes[i] = &contract.Lane{ID: id, Src: src, Account: p.Join(id), Flush: time.Millisecond, Out: out}
		if err := r.Add(lanes[i]); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 64<<10)
	var sent int64
	b.SetBytes(int64(cfg.Lanes * cfg.PerLane))
	b.ReportAllocs()
	for b.Loop() {
		for _, fd := range writers {
			for left := cfg.PerLane; left > 0; {
				n, err := unix.Write(fd, buf[:min(left, len(buf))])
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					b.Fatal(err)
				}
				left -= n
			}
		}
		sent += int64(cfg.Lanes * cfg.PerLane)
	}
	b.StopTimer()
	for _, fd := range writers {
		unix.Close(fd)
	}
	for range cfg.Lanes {
		if err := <-out.Finished; !errors.Is(err, io.EOF) {
			b.Errorf("lane finished with %v", err)
		}
	}
	st := r.Stats()
	if err := r.Close(); err != nil {
		b.Error(err)
	}
	for i, src := range sources {
		src.Close()
		lanes[i].Account.Leave()
	}
	if got := out.Bytes.Load(); got != sent {
		b.Errorf("received %d bytes, sent %d", got, sent)
	}
	if err := p.Close(); err != nil {
		b.Error(err)
	}
	b.ReportMetric(float64(out.Bytes.Load())/float64(max(st.Reads, 1)), "B/read")
	b.ReportMetric(float64(st.Reads)/float64(max(st.Waits, 1)), "reads/wait")
}
