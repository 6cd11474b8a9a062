package srcs_test

import (
	"errors"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// nobody is the unprivileged identity permission tests take on.
const nobody = 65534

// asUnprivileged runs f on an OS thread whose file-system identity is an
// unprivileged user, so that a test running as root still meets file
// permissions: on Linux the fsuid is per thread, and moving it away from 0
// drops CAP_DAC_OVERRIDE for that thread. The thread stays locked and is
// discarded when f returns. Not running as root, f runs as it is.
func asUnprivileged(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		if os.Geteuid() == 0 {
			unix.Setfsgid(nobody)
			unix.Setfsuid(nobody)
			if cur, _ := unix.SetfsuidRetUid(-1); cur != nobody {
				errc <- errors.New("could not drop the thread's fsuid")
				return
			}
		}
		errc <- f()
	}()
	return <-errc
}
