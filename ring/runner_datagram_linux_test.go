package ring

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/runnertest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// TestRunnerDatagrams runs the runners' datagram suite (runnertest) on
// the uring runner.
func TestRunnerDatagrams(t *testing.T) {
	requireURing(t)
	runnertest.TestDatagrams(t, func(cfg srcs.RunnerConfig) (runnertest.Runner, error) { return NewRunner(cfg) }, runnertest.Options{})
}

// sizedFd is a datagram descriptor source with a datagram limit.
type sizedFd struct {
	*fdSrc
	max int
}

func (s sizedFd) MaxDatagram() int { return s.max }

// TestRunnerDatagramAllocs checks that receiving datagrams allocates
// nothing in steady state: the msghdr lives in the worker's arena.
func TestRunnerDatagramAllocs(t *testing.T) {
	requireURing(t)
	p, err := pool.New(pool.Config{BufSize: 16 << 10, Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(srcs.RunnerConfig{Workers: 1, Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	// A unix datagram socketpair blocks the writer instead of dropping.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	src := sizedFd{&fdSrc{fd: fds[0], kind: srcs.Datagram}, 1000}
	em := &countEmitter{finished: make(chan error, 1)}
	l := &srcs.Lane{ID: 1, Src: src, Account: p.Join(1), Flush: time.Millisecond, Out: em}
	if err := r.Add(l); err != nil {
		t.Fatal(err)
	}
	const perRun = 64
	dgram := make([]byte, 1000)
	write := func() {
		for range perRun {
			for {
				_, err := unix.Write(fds[1], dgram)
				if err == nil {
					break
				}
				if err != unix.EINTR {
					t.Fatal(err)
				}
			}
		}
	}
	write() // grow the worker's slices
	allocs := testing.AllocsPerRun(20, write)
	const want = 22 * perRun * (1000 + srcs.DatagramHeaderLen)
	waitFor(t, "every datagram", func() bool { return em.bytes.Load() >= want })
	r.Remove(l)
	if err := <-em.finished; !errors.Is(err, srcs.ErrStopped) {
		t.Errorf("Finish(%v)", err)
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	src.Close()
	if err := p.Close(); err != nil {
		t.Error(err)
	}
	if got := em.bytes.Load(); got != want {
		t.Errorf("%d bytes emitted, want %d", got, want)
	}
	if chunks := em.chunks.Load(); chunks*4 > 22*perRun {
		t.Errorf("%d chunks for %d datagrams of 1000 bytes in 16 KiB buffers: not packed", chunks, 22*perRun)
	}
	if allocs > 1 {
		t.Errorf("%.1f allocations per %d datagrams in steady state, want 0", allocs, perRun)
	}
}
