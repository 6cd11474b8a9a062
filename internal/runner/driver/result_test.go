package driver

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/srcs"
)

func TestResult(t *testing.T) {
	for _, c := range []struct {
		n        int
		errno    unix.Errno
		datagram bool
		want     ReadResult
	}{
		{100, 0, false, ReadData},
		{0, 0, false, ReadEnd},
		{0, 0, true, ReadData}, // an empty datagram
		{0, unix.EAGAIN, false, ReadDrained},
		{0, unix.EAGAIN, true, ReadDrained},
		{0, unix.EINTR, false, ReadAgain},
		{0, unix.ECANCELED, true, ReadAgain},
		{0, unix.ECONNRESET, false, ReadFailed},
		{0, unix.EBADF, true, ReadFailed},
	} {
		if got := Result(c.n, c.errno, c.datagram); got != c.want {
			t.Errorf("Result(%d, %v, datagram %v) = %d, want %d", c.n, c.errno, c.datagram, got, c.want)
		}
	}
	if err := ReadError("recv", unix.ECONNRESET); !errors.Is(err, srcs.ErrReset) {
		t.Errorf("ReadError(recv, ECONNRESET) = %v, want srcs.ErrReset", err)
	}
	if Errno(nil) != 0 || Errno(unix.EAGAIN) != unix.EAGAIN || Errno(errors.New("x")) != unix.EIO {
		t.Error("Errno does not map nil, an errno and another error")
	}
}
