//go:build linux

package fallback_test

import (
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/fallback"
	"github.com/sluice-io/sluice/internal/runnertest"
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
	if err := g.R.Add(g.Lane(&runnertest.FDSource{FD: a, Kind: srcs.Datagram}, 0)); !errors.Is(err, unix.EPROTOTYPE) {
		t.Errorf("datagram kind on a stream socket: %v, want EPROTOTYPE", err)
	}
	if err := g.R.Add(g.Lane(&runnertest.FDSource{FD: 1 << 20, Kind: srcs.Stream}, 0)); !errors.Is(err, syscall.EBADF) {
		t.Errorf("bad descriptor: %v, want EBADF", err)
	}
	if st := g.R.Stats(); st.Lanes != 0 {
		t.Errorf("after failed Adds: %d lanes", st.Lanes)
	}
	if _, err := fallback.NewEpoll(srcs.RunnerConfig{Workers: -1, Pool: g.Pool}); err == nil {
		t.Error("NewEpoll with negative Workers succeeded")
	}
}
