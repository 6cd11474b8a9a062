//go:build !linux

package mqtt

import (
	"syscall"
	"time"
)

// socketQuiet cannot ask the kernel here: the keepalive relies on the
// chunks delivered and the bytes Read returned.
func socketQuiet(syscall.RawConn) (time.Duration, bool) { return 0, false }
