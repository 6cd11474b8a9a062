package uring

import (
	"errors"
	"fmt"
	"os"
)

var (
	// ErrNotSupported means io_uring cannot be used here: not Linux, a kernel
	// too old for a feature, io_uring disabled by sysctl, or blocked by a
	// seccomp filter. Errors from [New] and ring.Probe wrap it with the reason.
	// It matches errors.ErrUnsupported, like every "not supported" error in
	// sluice, so a caller can treat them alike without knowing this
	// package.
	ErrNotSupported error = &unsupportedError{"ring: io_uring not supported"}

	// ErrWrongThread means a method that enters the kernel ran on an OS
	// thread other than the one that created the ring. Lock the creating
	// goroutine with runtime.LockOSThread before [New] and use the ring only
	// from it.
	ErrWrongThread = errors.New("ring: used from a thread other than its owner")

	// ErrClosed is returned by methods of a closed ring. It matches
	// os.ErrClosed.
	ErrClosed = fmt.Errorf("ring: %w", os.ErrClosed)

	// ErrSQFull means no submission queue entry could be freed, even after
	// submitting.
	ErrSQFull = errors.New("ring: submission queue full")
)

// MemlockError reports that registering memory with the kernel failed for
// lack of locked-memory allowance (ENOMEM under RLIMIT_MEMLOCK, which is
// 8 MiB for users without CAP_IPC_LOCK). The caller can carry on without
// registration, using plain READ instead of READ_FIXED.
type MemlockError struct {
	Op    string // what was registered, such as "register buffers"
	Bytes int64  // bytes asked for
	Limit uint64 // soft RLIMIT_MEMLOCK at the time; ^uint64(0) is unlimited
	Err   error  // the underlying errno
}

func (e *MemlockError) Error() string {
	limit := "unlimited"
	if e.Limit != ^uint64(0) {
		limit = fmt.Sprintf("%d bytes", e.Limit)
	}
	return fmt.Sprintf("ring: %s: %d bytes exceed the locked-memory limit (RLIMIT_MEMLOCK %s): %v",
		e.Op, e.Bytes, limit, e.Err)
}

func (e *MemlockError) Unwrap() error { return e.Err }

// unsupportedError is a sentinel that matches errors.ErrUnsupported without
// taking its message.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }

func (e *unsupportedError) Is(target error) bool { return target == errors.ErrUnsupported }

// NotSupportedError says why io_uring, or one of its features, cannot be
// used. It matches [ErrNotSupported] and errors.ErrUnsupported with
// errors.Is, and unwraps to the errno behind it, if any.
type NotSupportedError struct {
	Op     string // what was attempted, such as "setup"
	Reason string // why it cannot work here, naming kernel versions or settings
	Err    error  // the underlying errno, or nil
}

func (e *NotSupportedError) Error() string {
	s := "ring: " + e.Op + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrNotSupported) and errors.Is(err,
// errors.ErrUnsupported) hold.
func (e *NotSupportedError) Is(target error) bool {
	return target == ErrNotSupported || target == errors.ErrUnsupported
}

func (e *NotSupportedError) Unwrap() error { return e.Err }
