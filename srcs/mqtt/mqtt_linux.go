package mqtt

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// socketQuiet returns how long the TCP socket behind rc has received
// nothing, as the kernel knows it: zero while unread bytes wait in it
// (SIOCINQ), else the time since its last data segment (TCP_INFO's
// tcpi_last_data_recv, in milliseconds). ok is false when it cannot tell.
func socketQuiet(rc syscall.RawConn) (quiet time.Duration, ok bool) {
	err := rc.Control(func(fd uintptr) {
		if n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil && n > 0 {
			quiet, ok = 0, true
			return
		}
		if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			quiet, ok = time.Duration(ti.Last_data_recv)*time.Millisecond, true
		}
	})
	return quiet, ok && err == nil
}
