// Package uring is sluice's interface to io_uring: the kernel ABI, ring
// setup and mapping, the submission and completion queues, SQE preparation,
// buffer and file registration, provided buffer rings, the opcodes a kernel
// supports ([Ring.SupportedOps]), a cross-thread [Waker], an off-heap
// [Arena] for memory the kernel touches, and the peer address an accept
// writes. It is the one room of the module, with internal/runner/mmsg and the
// pool's slab, that uses unsafe, and sys_linux.go its one file of raw
// system calls. The io_uring runner in ring/ is built on it, and ring.Probe
// reads the kernel through it; nothing else uses it.
//
// Its errors begin "ring: ", the package its users meet them through.
//
// # Kernel versions
//
// Rings can be created from 5.6 (the oldest kernel with IORING_OP_READ, RECV
// and CLOSE), but sluice's io_uring runner needs 5.19 (cancel by fd) and
// does best on 6.1 or newer, where [New] gets SINGLE_ISSUER (6.0) and
// DEFER_TASKRUN (6.1). Each flag, opcode
// and feature constant names the release that introduced it; ring.Probe
// reports what the running kernel has.
// When io_uring is absent or blocked (ENOSYS, EPERM from seccomp, sysctl
// kernel.io_uring_disabled), [New] says why with an error
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
// [Waker.Wake], the only method here meant for concurrent use.
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
package uring
