// Package front is what the uring and epoll runners put in front of their
// workers, and the lane bookkeeping both workers keep: the runner front
// (Front: add, remove, pause and resume, close, the first worker failure);
// the table of the lanes a runner drives, saying which worker drives each
// one under which token, with the least-loaded choice of a worker for a
// new lane; the slot allocator that gives a worker's lanes their tokens;
// the mailbox that carries commands to a worker; and the Host, a worker's
// books of its lanes (the line a turn serves them in, the turn's pace, a
// lane's buffer and grant, what its reads bring, its flush deadline in the
// flush heap). None of them knows how a worker reads.
package front
