//go:build !linux

package fallback

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// threadWaker is how other goroutines wake a thread lane out of poll(2):
// where there is no eventfd, a non-blocking pipe. wake and close are called
// under the lane's mutex; drain only by the lane's thread.
type threadWaker struct {
	r, w int
	one  [1]byte  // what wake writes; apart from buf, which drain fills
	buf  [64]byte // drained into by the lane's thread
}

func newThreadWaker() (threadWaker, error) {
	var p [2]int
	// Hold ForkLock so that no child inherits the pipe between its
	// creation and close-on-exec, as os.Pipe does where pipe2 is missing.
	syscall.ForkLock.RLock()
	err := unix.Pipe(p[:])
	if err == nil {
		unix.CloseOnExec(p[0])
		unix.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return threadWaker{}, os.NewSyscallError("pipe", err)
	}
	for _, fd := range p {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return threadWaker{}, os.NewSyscallError("fcntl", err)
		}
	}
	return threadWaker{r: p[0], w: p[1]}, nil
}

// wake makes the read end readable. EAGAIN means the pipe is full of
// wake-ups already, which still wakes the lane.
func (w *threadWaker) wake() error {
	_, err := unix.Write(w.w, w.one[:])
	if err != nil && err != unix.EAGAIN {
		return os.NewSyscallError("write", err)
	}
	return nil
}

// drain consumes every pending wake-up.
func (w *threadWaker) drain() {
	for {
		n, err := unix.Read(w.r, w.buf[:])
		if err == unix.EINTR {
			continue
		}
		if n < len(w.buf) || err != nil {
			return
		}
	}
}

func (w *threadWaker) close() {
	unix.Close(w.r)
	unix.Close(w.w)
}
