package srcs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"golang.org/x/sys/unix"
)

// AcceptThrough returns an acceptor whose connections r accepts on its own
// event loops, for an engine whose runner can (uring, epoll). It fails
// with contract.ErrNotRunnerAcceptable for a listener with TLS or the
// PROXY protocol. A program has no use for it: engine.Engine.AddListener
// calls it.
//
// The acceptor keeps what AcceptSource promises: at MaxConns no accept is
// armed, so further clients wait in the kernel's backlog; accepts failing for
// lack of descriptors or memory back off from 5ms to 1s, cut short when
// a connection closes; Allow refuses by address; sources are named by
// their peers. A connection r holds in a file table is a source only r can
// read (contract.Directed); one it could not is a descriptor, as AcceptDescriptor
// returns.
//
// The acceptor is not safe for concurrent use. Close it once done (after
// the listener closed, or instead of further Accepts): that cancels the
// accepts armed, and closes what they took.
func (l *Listener) AcceptThrough(r contract.AcceptRunner) (contract.Acceptor, error) {
	if l.hs != nil || l.rawf == nil {
		return nil, fmt.Errorf("srcs: accept %s through the runner: %w", l.name, contract.ErrNotRunnerAcceptable)
	}
	rc, err := l.rawf.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("srcs: accept %s through the runner: %w", l.name, err)
	}
	var q contract.AcceptQueue
	if cerr := rc.Control(func(fd uintptr) { q, err = r.StartAccept(int(fd)) }); cerr != nil {
		return nil, fmt.Errorf("srcs: accept %s through the runner: %w", l.name, cerr)
	}
	if err != nil {
		return nil, fmt.Errorf("srcs: accept %s through the runner: %w", l.name, err)
	}
	return &runnerAcceptor{l: l, q: q}, nil
}

// runnerAcceptor accepts a Listener's connections through a runner; see
// Listener.AcceptThrough.
type runnerAcceptor struct {
	l       *Listener
	q       contract.AcceptQueue
	granted int // grants out: each holds a slot under MaxConns
	// A back-off after a shortage: no grants until timer fires or a
	// connection closes.
	delay      time.Duration
	timer      *time.Timer
	backingOff bool
	closed     bool
}

// Accept returns the next connection the runner accepted and the
// listener admitted. It returns an error wrapping net.ErrClosed after the
// listener's Close, and ctx's error when ctx ends first.
func (a *runnerAcceptor) Accept(ctx context.Context) (contract.Source, error) {
	l := a.l
	if a.closed {
		return nil, l.errorf(net.ErrClosed)
	}
	for {
		if err := a.grant(ctx); err != nil {
			return nil, err
		}
		var backoff <-chan time.Time
		if a.backingOff {
			backoff = a.timer.C
		}
		select {
		case res := <-a.q.Ready():
			a.granted--
			src, err := a.take(res)
			if src != nil || err != nil {
				return src, err
			}
		case <-backoff:
			a.backingOff = false
		case <-l.freed:
			if a.backingOff {
				a.timer.Stop()
				a.backingOff = false
			}
		case <-ctx.Done():
			return nil, l.errorf(context.Cause(ctx))
		case <-l.done:
			return nil, l.errorf(net.ErrClosed)
		}
	}
}

// grant keeps Depth accepts granted, each holding a slot under MaxConns,
// unless backing off. With none granted and no slot free it waits for
// one: a connection closing.
func (a *runnerAcceptor) grant(ctx context.Context) error {
	if a.backingOff {
		return nil
	}
	l := a.l
	n := 0
	for a.granted+n < a.q.Depth() {
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
			default:
				goto give
			}
		}
		n++
	}
give:
	if n == 0 && a.granted == 0 {
		select {
		case l.slots <- struct{}{}:
			n = 1
		case <-ctx.Done():
			return l.errorf(context.Cause(ctx))
		case <-l.done:
			return l.errorf(net.ErrClosed)
		}
	}
	if n > 0 {
		a.granted += n
		a.q.Grant(n)
	}
	return nil
}

// unslot gives back the slot under MaxConns of a grant that brought no
// connection.
func (a *runnerAcceptor) unslot() {
	if a.l.slots != nil {
		<-a.l.slots
	}
}

// take turns an accept's result into a source: nil and no error for a
// connection refused or an accept worth trying again.
func (a *runnerAcceptor) take(res contract.RunnerAccepted) (Source, error) {
	l := a.l
	if res.Err != nil {
		a.unslot()
		switch {
		case errors.Is(res.Err, syscall.ECONNABORTED), errors.Is(res.Err, syscall.EINTR), errors.Is(res.Err, syscall.EAGAIN),
			errors.Is(res.Err, contract.ErrAcceptRetry):
			// The peer gave up while queued, as Go's Accept does; or the
			// grant went to a worker that stopped: go on.
			return nil, nil
		case exhausted(res.Err):
			a.backOff(res.Err)
			return nil, nil
		}
		return nil, l.errorf(res.Err)
	}
	a.delay = 0
	name := l.admitPeer(res.Peer, res.Path)
	if name == "" {
		a.closeAccepted(res)
		a.unslot()
		return nil, nil
	}
	l.counters.accepted.Add(1)
	l.opened()
	if res.Direct {
		return newDirectSource(a, name, res.Worker, res.Slot), nil
	}
	return l.newAcceptedFD(res.FD, name), nil
}

// backOff stops granting for a while after an accept failed for lack of
// descriptors or memory, as AcceptSource's retries do. The accepts armed
// meanwhile may fail the same way; they do not lengthen it.
func (a *runnerAcceptor) backOff(err error) {
	if a.backingOff {
		return
	}
	a.delay = a.l.shortage(err, a.delay)
	if a.timer == nil {
		a.timer = time.NewTimer(a.delay)
	} else {
		a.timer.Reset(a.delay)
	}
	a.backingOff = true
}

// closeAccepted closes a connection nobody will read.
func (a *runnerAcceptor) closeAccepted(res contract.RunnerAccepted) {
	if res.Direct {
		a.q.CloseDirect(res.Worker, res.Slot)
	} else if res.FD >= 0 {
		unix.Close(res.FD)
	}
}

// Close stops the runner's accepts, waits for every grant to come back,
// closing the connections accepted meanwhile, and releases the
// runner's duplicate of the socket. Idempotent.
func (a *runnerAcceptor) Close() error {
	if a.closed {
		return nil
	}
	a.closed = true
	a.q.Stop()
	for ; a.granted > 0; a.granted-- {
		a.closeAccepted(<-a.q.Ready())
		a.unslot()
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	return a.q.Close()
}

// directSource is a connection the runner holds in a worker's file table
// (Directed): only that runner reads it. Its state packs the worker, the
// slot and two flags in one word, so that an idle connection's source is
// its name and two words.
type directSource struct {
	name string
	a    *runnerAcceptor
	st   atomic.Uint64 // worker<<34 | slot<<2 | directClosed | directTaken
}

const (
	directTaken  = 1 << 0 // the runner took the connection: it closes it
	directClosed = 1 << 1 // Close was called
)

func newDirectSource(a *runnerAcceptor, name string, worker, slot uint32) *directSource {
	c := &directSource{name: name, a: a}
	c.st.Store(uint64(worker)<<34 | uint64(slot)<<2)
	return c
}

var (
	_ contract.Directed = (*directSource)(nil)
	_ Framed            = (*directSource)(nil)
)

func (c *directSource) Name() string                     { return c.name }
func (c *directSource) Framer() Framer                   { return c.a.l.framer }
func (c *directSource) AcceptedBy() contract.AcceptQueue { return c.a.q }

// TakeDirect implements Directed.
func (c *directSource) TakeDirect() (worker, slot uint32, ok bool) {
	for {
		st := c.st.Load()
		if st&(directTaken|directClosed) != 0 {
			return 0, 0, false
		}
		if c.st.CompareAndSwap(st, st|directTaken) {
			return uint32(st >> 34), uint32(st>>2) & (1<<32 - 1), true
		}
	}
}

// Open succeeds while the connection has not been closed.
func (c *directSource) Open(context.Context) error {
	if c.st.Load()&directClosed != 0 {
		return fmt.Errorf("srcs: open %s: %w", c.name, net.ErrClosed)
	}
	return nil
}

// Read fails: the connection has no descriptor in the process, and only
// the runner that accepted it reads it.
func (c *directSource) Read([]byte) (int, error) {
	return 0, fmt.Errorf("srcs: read %s: read by the runner that accepted it: %w", c.name, os.ErrInvalid)
}

// Close closes the connection unless the runner took it, and gives the
// listener its slot under MaxConns back, once.
func (c *directSource) Close() error {
	st := c.st.Or(directClosed)
	if st&directClosed != 0 {
		return nil
	}
	if st&directTaken == 0 {
		c.a.q.CloseDirect(uint32(st>>34), uint32(st>>2)&(1<<32-1))
	}
	c.a.l.closedConn()
	c.a.l.release()
	return nil
}

var _ contract.Acceptor = (*runnerAcceptor)(nil)
