// Package mmsg receives a batch of datagrams from a socket with one
// recvmmsg(2) call, for the runners that read datagram sockets themselves
// rather than through io_uring (the epoll runner). A datagram at a time
// costs a system call each; at hundreds of thousands of datagrams a
// second that is most of what a receiver spends, and a receiver that
// falls behind loses what its socket's buffer cannot hold.
//
// It is one of the two places in the module, with ring/, that make raw
// system calls and use unsafe: x/sys/unix has no recvmmsg. Everything the
// kernel writes into lives in the Receiver's own slices, which stay alive
// for the duration of the call.
package mmsg
