//go:build !linux

package srcs

import (
	"context"
	"os"
)

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
