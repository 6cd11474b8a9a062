package ring

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// TestRunnerDatagrams runs the runners' datagram suite (runnertest) on
// the uring runner.
func TestRunnerDatagrams(t *testing.T) {
	requireURing(t)
	runnertest.TestDatagrams(t, newRunnerWith(runnerOptions{}), runnertest.Options{})
}

// sizedFd is a datagram descriptor source with a datagram limit.
type sizedFd struct {
	*runnertest.FDSource
	max int
}

func (s sizedFd) MaxDatagram() int { return s.max }

// TestRunnerDatagramAllocs checks that receiving datagrams allocates
// nothing in steady state: the msghdr lives in the worker's arena. A unix
// datagram socketpair blocks the writer instead of dropping.
func TestRunnerDatagramAllocs(t *testing.T) {
	a := newAllocRig(t, 16<<10, unix.SOCK_DGRAM, func(fd int) srcs.Source {
		return sizedFd{&runnertest.FDSource{FD: fd, Kind: contract.Datagram}, 1000}
	})
	defer unix.Close(a.wr)
	const perRun = 64
	dgram := make([]byte, 1000)
	write := func() { a.write(t, dgram, perRun) }
	write() // grow the worker's slices
	allocs := testing.AllocsPerRun(20, write)
	const want = 22 * perRun * (1000 + srcs.DatagramHeaderLen)
	deadline := time.Now().Add(10 * time.Second)
	for a.out.Bytes.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	a.run.Remove(a.lane)
	if err := <-a.out.Finished; !errors.Is(err, srcs.ErrStopped) {
		t.Errorf("Finish(%v)", err)
	}
	a.close(t)
	if got := a.out.Bytes.Load(); got != want {
		t.Errorf("%d bytes emitted, want %d", got, want)
	}
	if chunks := a.out.Chunks.Load(); chunks*4 > 22*perRun {
		t.Errorf("%d chunks for %d datagrams of 1000 bytes in 16 KiB buffers: not packed", chunks, 22*perRun)
	}
	if allocs > 1 {
		t.Errorf("%.1f allocations per %d datagrams in steady state, want 0", allocs, perRun)
	}
}

// TestRunnerDatagramBatches: datagrams queued while a lane could not read
// come in with a few recvmmsg(2) calls of many datagrams each, not a
// receive per datagram, and arrive whole and in order.
func TestRunnerDatagramBatches(t *testing.T) {
	requireURing(t)
	g := runnertest.NewRig(t, newRunnerWith(runnerOptions{}), runnertest.RigConfig{
		Pool: pool.Config{BufSize: 64 << 10, Buffers: 4}, Runner: contract.RunnerConfig{Workers: 1}, Datagrams: true,
	})
	const total = 256
	before, after := g.DatagramBacklog(total)
	// recvmmsg batches of up to dgramBatch: 4 receives, and a few enters
	// for the poll and the wakes.
	if reads := after.Reads - before.Reads; reads > total/dgramBatch+2 {
		t.Errorf("%d receives for %d queued datagrams, want batches of %d", reads, total, dgramBatch)
	}
	if enters := after.Enters - before.Enters; enters > 8 {
		t.Errorf("%d enters for %d queued datagrams, want a few for the poll and the wakes", enters, total)
	}
}
