package srcstest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// ReadDesc reads a Descriptor source's stream to its end with poll(2) and
// read(2), as a runner would.
func ReadDesc(t testing.TB, src srcs.Source) []byte {
	t.Helper()
	d, err := src.(contract.Descriptor).Desc()
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != contract.Stream {
		t.Fatalf("Kind = %v, want stream", d.Kind)
	}
	var out []byte
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := unix.Read(d.FD, buf)
		switch {
		case err == unix.EAGAIN:
			if _, err := unix.Poll([]unix.PollFd{{Fd: int32(d.FD), Events: unix.POLLIN}}, 1000); err != nil && err != unix.EINTR {
				t.Fatal(err)
			}
		case err == unix.EINTR:
		case err != nil:
			t.Fatalf("read: %v", err)
		case n == 0:
			return out
		default:
			out = append(out, buf[:n]...)
		}
	}
	t.Fatal("srcstest: ReadDesc: no end of stream in time")
	return nil
}
