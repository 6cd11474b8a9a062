// Package mmsg receives a batch of datagrams from a socket with one
// recvmmsg(2) call, for the runners that drain datagram sockets
// themselves: the epoll runner, and the uring runner once its ring's poll
// says a socket is readable. Receiver.Take is that receive into a lane's
// rooms, with its commit, for both. A datagram at a time
// costs a system call each; at hundreds of thousands of datagrams a
// second that is most of what a receiver spends, and a receiver that
// falls behind loses what its socket's buffer cannot hold.
//
// It is one of the two places in the module, with internal/runner/uring, that
// make raw system calls and use unsafe: x/sys/unix has no recvmmsg. Everything the
// kernel writes into lives in the Receiver's own slices, which stay alive
// for the duration of the call.
package mmsg
