//go:build !linux

package srcs

import (
	"context"
	"fmt"
	"os"

	"github.com/sluice-io/sluice/internal/contract"
)

// AcceptDescriptor is AcceptSource for an engine whose runner reads
// descriptors itself. Outside Linux it returns AcceptSource's connections,
// which a runner detaches from Go's netpoller (Conn.Desc).
func (l *Listener) AcceptDescriptor(ctx context.Context) (Source, error) {
	return l.AcceptSource(ctx)
}

// rawListener is used by AcceptDescriptor on Linux only.
func rawListener(streamListener) *os.File { return nil }

// setKeepAlive is needed on Linux only, where AcceptDescriptor bypasses
// Go's accepted connections.
func setKeepAlive(*os.File) error { return nil }

// AcceptThrough is for runners that accept on Linux only.
func (l *Listener) AcceptThrough(contract.AcceptRunner) (contract.Acceptor, error) {
	return nil, fmt.Errorf("srcs: accept %s through the runner: %w", l.name, contract.ErrNotRunnerAcceptable)
}
