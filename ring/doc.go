// Package ring is sluice's io_uring runner. [Runner]'s workers arm polls
// and reads on rings of their own, reap the completions, wait and wake,
// and leave what a lane does with the bytes (commit, framing, flush, emit,
// finish) to internal/runner/driver's Lane, which every runner shares. [Probe]
// reports what io_uring can do on the running kernel, the answer the
// engine's runner choice reads, and [KernelFeatures] lists what the probe
// looks for, each with its first kernel release and what sluice uses it
// for.
//
// The kernel interface itself (the ABI, ring setup and mapping, the ops,
// registration, the waker and the raw system calls) is internal/runner/uring;
// this package has no unsafe code.
//
// # Kernel versions
//
// The runner needs 5.19 (cancel by descriptor) and timed waits (5.11), and
// does best on 6.1 or newer, where its rings get SINGLE_ISSUER (6.0) and
// DEFER_TASKRUN (6.1), and on 6.12, where a worker can gather completions
// for a while (IORING_FEAT_MIN_TIMEOUT). When io_uring is absent or
// blocked (ENOSYS, EPERM from seccomp, sysctl kernel.io_uring_disabled),
// [Probe] and [NewRunner] say why with an error matching
// [ErrNotSupported], which also matches errors.ErrUnsupported. On other
// operating systems the probe finds io_uring unsupported and [NewRunner]
// fails the same way, so callers need no build tags.
package ring
