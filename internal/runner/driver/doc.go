// Package driver is the lane machine every runner shares: a Lane takes a
// pool buffer, fills it as the runner's reads commit, cuts framed records
// and carries their incomplete tail into the next buffer, parks a slow
// sender's part of a record outside the pool, keeps the flush deadline,
// emits chunks and finishes the lane. It is written once, so that every
// change to how a lane behaves is made once.
//
// A Lane is a deterministic core in the manner of etcd raft's RawNode: it
// does no I/O, reads no clock (time is passed in) and is not safe for
// concurrent use. The runners are thin loops around it. The uring and
// epoll backends arm reads, reap them, wait, wake and cancel; the
// goroutine and thread runners block in reads; all of them ask the Lane
// for the space to read into, tell it what a read brought (Commit), wake
// at its deadline (Due, Flush) and end it (Finish). Its tests, a fuzz
// target among them, run without a kernel.
//
// Around the Lane sit the decisions every runner makes the same way, so
// that they too are written once: what a read's result means (Result,
// ReadError, Classify), how a datagram lane lays out its buffer
// (DatagramLimit and the header helpers), and how to read a descriptor,
// which AdmitDescriptor learns by asking the kernel (fstat(2), lseek(2),
// getsockopt(2)): the one place in the package that makes system calls.
// None of them reads or writes a source's bytes.
//
// The uring and epoll backends are one event loop over two kernel
// interfaces, and the books they keep of their lanes are written once
// too: a Host holds a worker's line (the order a turn serves lanes in,
// Line and Requeue), the turn's budget (Pace), its lanes' pool acquires
// and grants (Grants), their commits and their flush deadlines (the flush
// heap); each lane's part of them is a Seat embedded in the backend's
// lane. A completed read is one call (Host.Completed). The backend does
// only what its kernel interface asks: arm a poll, a read or a cancel,
// wait, wake.
//
// Building with -tags invariants makes every Lane check its own rules: a
// buffer is held by exactly one lane, a lane finishes exactly once, and
// nothing is emitted after it finished.
package driver
