package uring

// The only file that makes the io_uring system calls. Each wrapper takes
// unsafe.Pointer arguments and converts them to uintptr inside the call
// expression, the form the unsafe package promises keeps the object alive and
// in place for the duration of the call; runtime.KeepAlive repeats the promise
// for readers. Every call that can block uses Syscall6, so the Go scheduler
// can run other goroutines while the thread is in the kernel; only
// sysEnterNowait, which never sleeps, uses RawSyscall6.

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysSetup calls io_uring_setup(2). The kernel reads and rewrites p.
func sysSetup(entries uint32, p *params) (int, error) {
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_IO_URING_SETUP,
			uintptr(entries), uintptr(unsafe.Pointer(p)), 0, 0, 0, 0)
		runtime.KeepAlive(p)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return -1, errno
		}
		return int(fd), nil
	}
}

// sysEnter calls io_uring_enter(2), retrying on EINTR. The kernel returns
// EINTR only when it submitted nothing, so a retry never submits twice. arg is
// nil, or an io_uring_getevents_arg with enterExtArg in flags. A relative
// timeout in arg would restart in full on every retry, so with enterExtArg
// EINTR is returned for the caller to retry with the time that is left.
func sysEnter(fd int, toSubmit, minComplete, flags uint32, arg unsafe.Pointer, argSize uintptr) (int, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER,
			uintptr(fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags),
			uintptr(arg), argSize)
		runtime.KeepAlive(arg)
		if errno == unix.EINTR && flags&enterExtArg == 0 {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// sysEnterNowait calls io_uring_enter(2) to submit and to run deferred
// completion work without waiting (GETEVENTS with min_complete 0, no
// timeout), so it never sleeps: io_uring issues every operation
// non-blocking and moves one that would block to a poll or to its
// io-wq threads. It is therefore made as a raw system call: the thread
// keeps its P, so the Go runtime neither hands the P to another thread
// when the kernel spends long copying (page-cache reads complete at
// submission) nor makes the thread queue for a P when it returns, which
// for a locked thread costs two context switches.
func sysEnterNowait(fd int, toSubmit uint32) (int, error) {
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_IO_URING_ENTER,
			uintptr(fd), uintptr(toSubmit), 0, uintptr(enterGetEvents), 0, nsigBytes)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// sysRegister calls io_uring_register(2), retrying on EINTR.
func sysRegister(fd int, op uint32, arg unsafe.Pointer, nr uint32) (int, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER,
			uintptr(fd), uintptr(op), uintptr(arg), uintptr(nr), 0, 0)
		runtime.KeepAlive(arg)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}
