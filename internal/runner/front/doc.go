// Package front is what the uring and epoll runners put in front of their
// workers: the runner front (Front: add, remove, pause and resume, close,
// the first worker failure); the table of the lanes a runner drives,
// saying which worker drives each one under which token, with the
// least-loaded choice of a worker for a new lane; the slot allocator that
// gives a worker's lanes their tokens; and the mailbox that carries
// commands to a worker. None of them knows how a worker reads: the books
// a worker keeps of its lanes are internal/runner/driver's Host.
package front
