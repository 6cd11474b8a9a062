//go:build !linux

package srcs

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// ErrNotRunnerAcceptable says a listener's connections cannot be accepted
// by a runner: outside Linux, none can.
var ErrNotRunnerAcceptable = errors.New("connections are read through Go")

// AcceptDescriptor is Accept for an engine whose runner reads descriptors
// itself. Outside Linux it returns Accept's connections, which a runner
// detaches from Go's netpoller (Conn.Desc).
func (l *Listener) AcceptDescriptor(ctx context.Context) (Source, error) {
	return l.AcceptSource(ctx)
}

// rawListener is used by AcceptDescriptor on Linux only.
func rawListener(streamListener) *os.File { return nil }

// setKeepAlive is needed on Linux only, where AcceptDescriptor bypasses
// Go's accepted connections.
func setKeepAlive(*os.File) error { return nil }

// AcceptThrough is for runners that accept on Linux only.
func (l *Listener) AcceptThrough(AcceptRunner) (*RunnerAcceptor, error) {
	return nil, fmt.Errorf("srcs: accept %s through the runner: %w", l.name, ErrNotRunnerAcceptable)
}

// RunnerAcceptor is Linux only.
type RunnerAcceptor struct{}

func (*RunnerAcceptor) Accept(context.Context) (Source, error) { return nil, ErrNotRunnerAcceptable }
func (*RunnerAcceptor) Close() error                           { return nil }
