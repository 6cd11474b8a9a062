//go:build linux

package uring

import (
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// benchRing creates a ring on the benchmark's goroutine, which it locks.
func benchRing(b *testing.B, cfg Config) *Ring {
	b.Helper()
	requireURing(b)
	runtime.LockOSThread()
	r, err := New(cfg)
	if err != nil {
		runtime.UnlockOSThread()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := r.Close(); err != nil {
			b.Error(err)
		}
		runtime.UnlockOSThread()
	})
	return r
}

func BenchmarkNop(b *testing.B) {
	for _, batch := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			r := benchRing(b, Config{Entries: 64})
			b.ReportAllocs()
			ops := 0
			for b.Loop() {
				for i := range batch {
					s := r.GetSQE()
					s.PrepNop()
					s.UserData = uint64(i)
				}
				if _, err := r.SubmitAndWait(uint32(batch)); err != nil {
					b.Fatal(err)
				}
				ops += r.ForEachCQE(func(*CQE) {})
			}
			if ops > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ops), "ns/nop")
			}
		})
	}
}

// BenchmarkRecvRoundTrip writes 64 bytes into a socketpair and receives
// them through the ring: one write(2) and one io_uring_enter per op.
func BenchmarkRecvRoundTrip(b *testing.B) {
	r := benchRing(b, Config{Entries: 8})
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	a, err := NewArena(4096)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() }) // after the ring's Close
	buf, _ := a.Alloc(64, 64)
	msg := make([]byte, 64)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		s := r.GetSQE()
		s.PrepRecv(fds[0], buf, 0, 0)
		s.UserData = 1
		if _, err := unix.Write(fds[1], msg); err != nil {
			b.Fatal(err)
		}
		if _, err := r.SubmitAndWait(1); err != nil {
			b.Fatal(err)
		}
		c, ok := r.PeekCQE()
		if !ok || c.Res != int32(len(msg)) {
			b.Fatalf("recv: %v %+v", ok, c)
		}
		r.CQAdvance(1)
	}
}
