//go:build linux

package fallback_test

import (
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// TestEpollAddErrors adds what only a descriptor runner refuses (the
// shared cases are the suite's): sources without a descriptor, a datagram
// kind on a stream socket, a bad descriptor.
func TestEpollAddErrors(t *testing.T) {
	g := runnertest.NewRig(t, newEpoll, runnertest.RigConfig{Pool: pool.Config{Buffers: 4}})
	if g.R.Name() != "epoll" {
		t.Errorf("Name() = %q", g.R.Name())
	}
	if err := g.R.Add(g.Lane(runnertest.NoDesc{}, 0)); !errors.Is(err, srcs.ErrNoDescriptor) {
		t.Errorf("source without descriptor: %v, want srcs.ErrNoDescriptor", err)
	}
	a, b := runnertest.Socketpair(t, unix.SOCK_STREAM)
	defer unix.Close(b)
	if err := g.R.Add(g.Lane(&runnertest.FDSource{FD: a, Kind: contract.Datagram}, 0)); !errors.Is(err, unix.EPROTOTYPE) {
		t.Errorf("datagram kind on a stream socket: %v, want EPROTOTYPE", err)
	}
	if err := g.R.Add(g.Lane(&runnertest.FDSource{FD: 1 << 20, Kind: contract.Stream}, 0)); !errors.Is(err, syscall.EBADF) {
		t.Errorf("bad descriptor: %v, want EBADF", err)
	}
	if st := g.R.Stats(); st.Lanes != 0 {
		t.Errorf("after failed Adds: %d lanes", st.Lanes)
	}
	if _, err := fallback.NewEpoll(contract.RunnerConfig{Workers: -1, Pool: g.Pool}); err == nil {
		t.Error("NewEpoll with negative Workers succeeded")
	}
}

// TestEpollDatagramBatches: datagrams queued while a lane could not read
// come in with a few recvmmsg calls, not one call each.
func TestEpollDatagramBatches(t *testing.T) {
	g := runnertest.NewRig(t, newEpoll, runnertest.RigConfig{
		Pool: pool.Config{BufSize: 64 << 10, Buffers: 4}, Runner: contract.RunnerConfig{Workers: 1}, Datagrams: true,
	})
	const total = 256
	before, after := g.DatagramBacklog(total)
	// 64 a call at most (the lane's turn budget), and one that finds the
	// socket empty.
	if reads := after.Reads - before.Reads; reads > total/64+2 {
		t.Errorf("%d receives for %d queued datagrams, want batches", reads, total)
	}
}
