package contract

import (
	"context"
	"errors"
	"net/netip"
)

// AcceptRunner is a runner that accepts a listener's connections on its
// own event loops: the uring runner with IORING_OP_ACCEPT on every
// worker's ring, straight into the worker's registered file table; the
// epoll runner with accept4(2) on a readiness edge in a worker's loop. A
// srcs.Listener drives it through AcceptThrough; no goroutine, net.Conn
// or netpoller registration is made per connection, and a connection
// accepted into a file table never has a descriptor in the process at
// all.
type AcceptRunner interface {
	// StartAccept starts accepting on the listening socket fd, which it
	// duplicates (the caller keeps fd). It arms no accept until granted.
	StartAccept(fd int) (AcceptQueue, error)
}

// AcceptQueue is one listener's accepts on an AcceptRunner.
//
// Each accept the runner arms takes a grant, and every grant comes back
// as exactly one RunnerAccepted on Ready: a connection, or the error that
// ended the accept (an accept cancelled by Stop, or refused because the
// runner closed, ends with an error matching net.ErrClosed; a grant a
// stopped worker gave back while others run, with ErrAcceptRetry). The caller
// holds at most Depth grants at once, so that the runner never blocks on
// Ready. Grant and Stop are called from one goroutine.
type AcceptQueue interface {
	// Depth is the most grants outstanding at once.
	Depth() int
	// Grant lets the runner arm n more accepts.
	Grant(n int)
	// Ready yields one RunnerAccepted for every grant.
	Ready() <-chan RunnerAccepted
	// CloseDirect closes a connection held in a worker's file table
	// (RunnerAccepted.Direct) that no lane took. Any goroutine.
	CloseDirect(worker, slot uint32)
	// Stop cancels the accepts armed and returns the unused grants, each
	// on Ready. It does not wait.
	Stop()
	// Close releases the duplicated socket. Call it once every grant has
	// come back; after Stop it also waits for every worker to let go of
	// the socket.
	Close() error
}

// ErrAcceptRetry is the error of a grant an AcceptRunner gave back
// without accepting, because the worker it went to stopped while others
// still run: grant it again.
var ErrAcceptRetry = errors.New("accept: grant returned by a stopped worker; grant again")

// ErrNotRunnerAcceptable says a listener's connections cannot be accepted
// by a runner: they need Go to read them (TLS, the PROXY protocol), the
// listener has no socket of its own, or the platform is not Linux.
var ErrNotRunnerAcceptable = errors.New("connections are read through Go")

// RunnerAccepted is what an AcceptRunner accepted: a connection held in
// slot Slot of worker Worker's file table (Direct), or a non-blocking
// descriptor the receiver owns (FD, when the table had no room), or the
// error that ended the accept.
type RunnerAccepted struct {
	FD           int // -1 unless the connection is a descriptor
	Direct       bool
	Worker, Slot uint32
	// Peer is a TCP peer's address; Path a unix peer's bound name, if it
	// bound one.
	Peer netip.AddrPort
	Path string
	Err  error
}

// Acceptor yields the connections an AcceptRunner accepted for a
// listener, as sources (srcs.Listener.AcceptThrough). It is not safe for
// concurrent use. Close cancels the accepts armed and closes what they
// took.
type Acceptor interface {
	Accept(ctx context.Context) (Source, error)
	Close() error
}

// Directed is a source whose connection an AcceptRunner holds in a file
// table (RunnerAccepted.Direct): only that runner can read it.
type Directed interface {
	Source
	// AcceptedBy is the queue the connection came from.
	AcceptedBy() AcceptQueue
	// TakeDirect hands the connection over to the runner, once: the
	// runner then closes it when it is done. ok is false once the
	// source was closed or taken.
	TakeDirect() (worker, slot uint32, ok bool)
}
