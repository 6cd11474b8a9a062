// Package ring is sluice's interface to io_uring: the kernel ABI, ring setup
// and mapping, the submission and completion queues, SQE preparation, buffer
// and file registration, provided buffer rings, a cross-thread [Waker], an
// off-heap [Arena] for memory the kernel touches, and a cached feature
// [Probe]. [Runner], the io_uring runner, is built on it: its workers arm
// polls and reads, reap their completions, wait and wake, and leave what a
// lane does with the bytes (commit, framing, flush, emit, finish) to
// internal/driver's Lane, which every runner shares.
//
// # Kernel versions
//
// Rings can be created from 5.6 (the oldest kernel with IORING_OP_READ, RECV
// and CLOSE), but sluice's io_uring runner assumes 5.19 (multishot accept,
// provided buffer rings, cancel by fd) and does best on 6.1 or newer, where
// [New] gets SINGLE_ISSUER (6.0) and DEFER_TASKRUN (6.1). Each flag, opcode
// and feature constant names the release that introduced it, [Probe]
// reports what the running kernel has, and [KernelFeatures] lists what the
// probe looks for, each with its release and what sluice uses it for.
// When io_uring is absent or blocked (ENOSYS, EPERM from seccomp, sysctl
// kernel.io_uring_disabled), [New] and [Probe] say why with an error
// matching [ErrNotSupported], which also matches errors.ErrUnsupported.
// On other operating systems every function returns ErrNotSupported, so
// callers need no build tags.
//
// # Threads and ownership
//
// A [Ring] belongs to one OS thread. Lock a goroutine with
// runtime.LockOSThread, call [New] on it, and make every call on the ring
// from that goroutine until [Ring.Close] returns. The kernel enforces this for
// SINGLE_ISSUER rings; the ring reports misuse as [ErrWrongThread]. Other
// goroutines never touch the ring: they queue commands and call
// [Waker.Wake], the only method here meant for concurrent use besides
// [Probe].
//
// # Memory
//
// user_data is an integer the caller owns; [PackUserData] packs a slot and a
// generation into it. It never carries a Go pointer. Memory the kernel reads
// or writes after the submitting call returns (buffers, iovecs, msghdrs,
// timespecs, addresses) must stay valid and unmoved until the completion
// arrives: keep it off the Go heap, in an [Arena] or the buffer pool's slab,
// or in arrays that outlive the operation. Steady-state submission and
// completion (GetSQE, Prep, Submit, SubmitAndWait, PeekCQE, CQAdvance)
// allocate nothing.
//
// # In flight and teardown
//
// The ring counts every submitted SQE as in flight until a CQE without
// CQEFMore comes back for it (multishot operations post many CQEs and end
// with one lacking the flag). [Ring.Close] cancels everything, reaps until
// nothing is in flight, and only then unmaps and closes the ring.
package ring
