package fallback

import (
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// threadWaker is how other goroutines wake a thread lane out of poll(2): on
// Linux one non-blocking eventfd, which costs a single descriptor per lane.
// wake and close are called under the lane's mutex; drain only by the lane's
// thread.
type threadWaker struct {
	r   int // polled and drained; the same eventfd as w
	w   int
	one [8]byte // the counter increment, in the kernel's byte order
	buf [8]byte
}

func newThreadWaker() (threadWaker, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return threadWaker{}, os.NewSyscallError("eventfd", err)
	}
	w := threadWaker{r: fd, w: fd}
	binary.NativeEndian.PutUint64(w.one[:], 1)
	return w, nil
}

// wake makes the wake descriptor readable. EAGAIN means the counter is
// saturated, which still wakes the lane.
func (w *threadWaker) wake() error {
	_, err := unix.Write(w.w, w.one[:])
	if err != nil && err != unix.EAGAIN {
		return os.NewSyscallError("write", err)
	}
	return nil
}

// drain consumes every pending wake-up: one read resets the counter.
func (w *threadWaker) drain() {
	_, _ = unix.Read(w.r, w.buf[:])
}

func (w *threadWaker) close() {
	unix.Close(w.r)
}
