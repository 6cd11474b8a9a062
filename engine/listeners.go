package engine

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// Acceptor yields connections as sources: *srcs.Listener implements it.
type Acceptor interface {
	AcceptSource(ctx context.Context) (srcs.Source, error)
	Close() error
}

var _ Acceptor = (*srcs.Listener)(nil)

// descriptorAcceptor is the optional capability of an Acceptor that can
// yield its connections as raw descriptors, with no net.Conn in between
// (srcs.Listener.AcceptDescriptor). The engine uses it when its runner
// reads descriptors itself.
type descriptorAcceptor interface {
	AcceptDescriptor(ctx context.Context) (srcs.Source, error)
}

var _ descriptorAcceptor = (*srcs.Listener)(nil)

// AddListener serves every connection l accepts as a source, until
// Shutdown or l fails, with opts applied to each connection (WithAdded
// tells which connections are l's). The engine closes l at Shutdown. A
// connection the runner cannot take for lack of descriptors is kept open
// and offered to it again as other sources end; the listener accepts
// nothing more meanwhile. Under the uring and epoll runners a
// *srcs.Listener without TLS or the PROXY protocol is accepted in the
// runner's own loops (srcs.Listener.AcceptThrough): under uring on the
// workers' rings, each connection straight into a worker's file table;
// under epoll with accept4 on a readiness edge in a worker's loop. Under
// the thread runner it hands its connections over as raw sockets
// (srcs.Listener.AcceptDescriptor). Either way no net.Conn, netpoller
// registration or goroutine is made per connection.
func (e *Engine) AddListener(l Acceptor, opts ...SourceOption) error {
	so := sourceOpts{}
	for _, opt := range opts {
		opt(&so)
	}
	if err := so.check(); err != nil {
		return err
	}
	// What every connection would be refused for is refused here, once.
	if fl, ok := l.(srcs.Framed); ok && !so.framerOK {
		so.framer = fl.Framer()
	}
	if err := e.checkFramer(so.framer); err != nil {
		return err
	}
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return errAdd("listener", ErrClosed)
	}
	defer e.mu.Unlock()
	accept, stop := e.acceptorFor(l)
	e.listeners = append(e.listeners, l)
	// Spawned under the lock, so Shutdown either sees this loop or refused
	// the listener: nothing starts after it has waited for its tasks.
	e.spawn(func() {
		defer stop()
		for {
			src, err := accept(e.ctx)
			if err != nil {
				if e.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					e.log.Warn("listener stopped", "err", err)
					e.reportListener(l, fmt.Errorf("listener stopped: %w", err))
				}
				return
			}
			if err := e.addOpened(src, opts); err != nil {
				src.Close()
				if errors.Is(err, ErrClosed) {
					return
				}
				e.log.Warn("accepted connection refused", "name", src.Name(), "err", err)
				e.reportListener(l, fmt.Errorf("connection from %s refused: %w", src.Name(), err))
			}
		}
	})
	return nil
}

// acceptorFor picks how l's connections are accepted: by the runner on
// its own loops when it can (uring and epoll, for a listener without TLS
// or the PROXY protocol), else as raw sockets when the runner reads
// descriptors (thread), else as Go's connections. stop ends the accepting once the
// listener's loop is done.
func (e *Engine) acceptorFor(l Acceptor) (accept func(context.Context) (srcs.Source, error), stop func()) {
	if ar, ok := e.runner.(contract.AcceptRunner); ok {
		if ta, ok := l.(throughAcceptor); ok {
			ra, err := ta.AcceptThrough(ar)
			if err == nil {
				accept := func(ctx context.Context) (srcs.Source, error) { return ra.Accept(ctx) }
				return accept, func() {
					if err := ra.Close(); err != nil {
						e.log.Warn("listener: closing the runner's accepts", "err", err)
					}
				}
			}
			if !errors.Is(err, contract.ErrNotRunnerAcceptable) {
				e.log.Warn("listener: the runner cannot accept; accepting through Go", "err", err)
			}
		}
	}
	if da, ok := l.(descriptorAcceptor); ok && e.runner.Name() != RunnerGoroutine {
		// The runner reads sockets itself: no net.Conn, netpoller
		// registration or duplicated descriptor per connection.
		return da.AcceptDescriptor, func() {}
	}
	return l.AcceptSource, func() {}
}

// throughAcceptor is the optional capability of an Acceptor whose
// connections a runner can accept on its own loops
// (srcs.Listener.AcceptThrough).
type throughAcceptor interface {
	AcceptThrough(r contract.AcceptRunner) (contract.Acceptor, error)
}

var _ throughAcceptor = (*srcs.Listener)(nil)

// reportListener hands an error of a listener's to the error handler: on
// the delivery queue's consumer side, as a source's errors, or here with
// an inline handler.
func (e *Engine) reportListener(l Acceptor, err error) {
	serr := &srcs.SourceError{Name: acceptorName(l), Op: "accept", Err: err}
	if e.inline {
		e.reportError(serr)
		return
	}
	e.shards[0].push(item{chunk: Chunk{Name: serr.Name}, err: serr})
}

// acceptorName names a listener in its errors.
func acceptorName(l Acceptor) string {
	switch l := l.(type) {
	case interface{ Name() string }:
		return l.Name()
	case interface{ Addr() net.Addr }:
		return l.Addr().Network() + "://" + l.Addr().String()
	}
	return "listener"
}
