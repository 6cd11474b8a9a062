// Package lanes holds the plumbing the uring and epoll runners share: the
// table of the lanes a runner drives, saying which worker drives each one
// under which token, with the least-loaded choice of a worker for a new
// lane; and the slot allocator that gives a worker's lanes their tokens.
// Neither knows how a worker reads.
package lanes
