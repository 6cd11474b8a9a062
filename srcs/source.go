package srcs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
)

// ID identifies a source within an engine. It doubles as the source's pool
// account id.
type ID = pool.SourceID

// Source is what every source implements (NebulaStream's G4: a tiny
// interface). Open and Close bracket one session: a connection, an open
// file. A source that can reconnect (see Reconnector) may be opened again
// after Close.
//
// A Source is driven by one runner at a time and need not be safe for
// concurrent use, except that Close and SetReadDeadline (when offered) may
// be called while a Read is blocked, to unblock it.
type Source interface {
	// Name is a human-readable address or path, used in errors and stats.
	Name() string
	// Open starts a session. It may block (a dial), honouring ctx, which
	// the engine cancels once Open returns: a session must not keep it.
	Open(ctx context.Context) error
	// Read reads into p with io.Reader semantics. Runners that drive a
	// descriptor of a source sluice provides do not call it.
	Read(p []byte) (int, error)
	// Close ends the session and releases its resources. It is idempotent.
	Close() error
}

// Identified is the optional capability of sources that know who is on
// the other end beyond an address: a TLS session whose client sent a
// verified certificate. Identity returns its subject ("CN=host,O=Org"), or
// "" for none. The source's Name ends with it too, so that chunks and logs
// carry it.
type Identified interface {
	Identity() string
}

// Deadliner is the optional capability of sources whose blocking Read can
// be interrupted by a deadline, as net.Conn's can. The goroutine runner
// uses it for flush timeouts and to stop a source without closing it.
type Deadliner interface {
	SetReadDeadline(t time.Time) error
}

// Reconnector is the optional capability of sources that can be opened
// again after their session fails (a TCP client, an MQTT subscriber). The
// engine retries Open with jittered exponential backoff up to MaxBackoff.
type Reconnector interface {
	Reconnect() Backoff
}

// Backoff configures reconnection.
type Backoff struct {
	Initial time.Duration // first delay; default 50ms
	Max     time.Duration // cap on the delay; default 5s
	// Attempts bounds consecutive failed opens; 0 means retry forever.
	Attempts int
}

// Repeater is the optional capability of sources that want to be read
// again from the start when they reach end of stream (a file read in a
// loop for benchmarks). Again is called after the session reached EOF and
// was closed; if it returns true the engine opens the source again and the
// stream continues without an end-of-stream chunk.
type Repeater interface {
	Again() bool
}

// ReleaseObserver is the optional capability of sources that must know
// when their bytes have been processed: a tail writes its checkpoint, a
// subscriber acknowledges messages. The engine calls Released with the
// number of the source's bytes, counted from its first delivered byte,
// whose chunks have all been released. Bytes a framed lane skipped (a
// record too long to deliver) count too, as released with the chunk that
// follows them. Calls come in order and never go
// backwards: a chunk released early is counted only once every chunk
// before it has been released too. Chunks the engine discards at a forced
// shutdown are never counted. Released runs on the releasing goroutine and
// must be quick and safe for concurrent use with the source's other
// methods.
type ReleaseObserver interface {
	Released(through int64)
}

// ChunkObserver is the optional capability of sources that must see their
// bytes as they are delivered: an MQTT subscriber learns where each QoS 1
// message lies in its stream, to acknowledge it once released. The engine
// calls Delivered with each data chunk's bytes and flags, in the source's
// order and before processing can see the chunk, and Skipped with the
// count of bytes a framed lane dropped while it skipped a record too long
// to deliver. Offsets count as ReleaseObserver counts them: the bytes of
// every Delivered and Skipped call so far. Both run on the runner's
// goroutine: they must be quick, must not block, and must not keep data.
type ChunkObserver interface {
	Delivered(data []byte, flags Flags)
	Skipped(n int64)
}

// Errors shared by sources and runners. Runners and sources wrap them with
// %w so callers can use errors.Is.
var (
	// ErrStopped is how a runner finishes a lane that was removed.
	ErrStopped = errors.New("srcs: source stopped")
	// ErrReset is a connection reset by the peer (ECONNRESET, EPIPE).
	ErrReset = errors.New("srcs: connection reset")
	// ErrTimeout is an I/O or dial timeout.
	ErrTimeout = errors.New("srcs: timeout")
	// ErrNoDescriptor says a source has no kernel descriptor to give: a
	// TLS session, whose socket carries ciphertext, or a connection whose
	// socket a runner took (SyscallConn fails with it).
	ErrNoDescriptor = contract.ErrNoDescriptor
)

// DropCounter is the optional capability of sources that can read how many
// datagrams the kernel dropped before sluice could receive them (a full
// socket receive buffer). The engine shows it in per-source stats.
type DropCounter interface {
	Drops() (uint64, error)
}

// SourceError wraps an error with the source it happened to. The engine
// hands these to its error handler.
type SourceError struct {
	ID   ID
	Name string
	Op   string // "open", "read", "close", "accept"
	Err  error
}

func (e *SourceError) Error() string {
	return fmt.Sprintf("source %d (%s): %s: %v", e.ID, e.Name, e.Op, e.Err)
}

func (e *SourceError) Unwrap() error { return e.Err }
