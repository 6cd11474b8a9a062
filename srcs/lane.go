package srcs

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/pool"
)

// Flags describe a chunk.
type Flags uint8

const (
	// Partial marks a buffer emitted before it was full: the flush timeout
	// fired, the source stopped, or an error or end of stream followed.
	Partial Flags = 1 << iota
	// EndOfStream marks the empty chunk that follows a source's last data.
	EndOfStream
	// Datagrams marks a buffer that holds whole datagrams, each behind a
	// 4-byte little-endian length (see ForEachDatagram).
	Datagrams
	// Records marks a chunk of a framed lane (see Lane.Framer): it starts
	// at a record boundary and holds whole records only, unless Truncated
	// is set too.
	Records
	// Truncated marks the last chunk of a framed lane's session that ended
	// inside a record: the bytes after its last whole record are the start
	// of a record the source never finished.
	Truncated
)

func (f Flags) String() string {
	var parts []string
	for _, x := range []struct {
		f    Flags
		name string
	}{{Partial, "partial"}, {EndOfStream, "eos"}, {Datagrams, "datagrams"},
		{Records, "records"}, {Truncated, "truncated"},
	} {
		if f&x.f != 0 {
			parts = append(parts, x.name)
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// Emitter is where a runner hands its work. The engine implements it.
// Both methods are safe for concurrent use and never block on the consumer:
// backpressure reaches runners through Runner.SetPaused and the pool.
type Emitter interface {
	// Emit hands a filled buffer downstream: n bytes of b.Bytes() are
	// valid, and first is when the first of them arrived (for a framed
	// lane: when its first record was complete). Ownership of b passes to
	// the emitter. n is never zero.
	Emit(l *Lane, b *pool.Buf, n int, flags Flags, first time.Time)
	// Finish reports that the runner has stopped driving the lane and will
	// not touch its source or descriptor again. err is io.EOF at end of
	// stream, ErrStopped after Runner.Remove, or what went wrong. Finish is
	// called exactly once per Add, after the lane's last Emit, and the
	// runner holds no buffer of the lane's account by then.
	Finish(l *Lane, err error)
}

// Lane is one opened source as a runner drives it. The engine creates a
// lane, opens its source, and hands it to exactly one runner with Add. The
// runner reads into buffers from Account, emits them through Out, and calls
// Out.Finish once when it stops. The fields but Runner are set before Add
// and are read-only afterwards.
type Lane struct {
	ID      ID
	Src     Source
	Account *pool.Account
	// Flush bounds how long a partly filled buffer is held: after Flush
	// since its first byte, the runner emits it with the Partial flag.
	// Zero means emit after every read.
	Flush time.Duration
	// Framer, when set, frames the lane's stream into records: chunks end
	// on record boundaries and carry the Records flag (see Framer). Nil
	// means raw bytes. Datagram lanes are never framed.
	Framer Framer
	Out    Emitter
	// Runner belongs to the runner that drives the lane, which keeps its
	// handle on the lane here rather than in a table of its own (a map
	// entry per connection): the event-loop runners keep the worker and
	// the token (internal/lanes.Table). Zero while no runner drives the
	// lane. The engine never touches it; the runner guards it.
	Runner RunnerRef
}

// RunnerRef is a runner's handle on a lane it drives (Lane.Runner): the
// worker, counted from 1 so that the zero RunnerRef means none, and the
// lane's token on that worker.
type RunnerRef struct {
	Worker uint32
	Token  uint64
}

// Name returns the source's name.
func (l *Lane) Name() string { return l.Src.Name() }

// Classify maps a read error from any runner to the shared vocabulary, so
// that callers see the same typed errors whichever runner read the bytes:
// io.EOF stays io.EOF, resets wrap ErrReset, deadlines and timeouts wrap
// ErrTimeout. Other errors pass through unchanged.
func Classify(err error) error {
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return err
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return &wrapped{ErrReset, err}
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return &wrapped{ErrTimeout, err}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &wrapped{ErrTimeout, err}
	}
	return err
}

// wrapped is an error that is both a sentinel and its cause.
type wrapped struct {
	kind, cause error
}

func (w *wrapped) Error() string   { return w.kind.Error() + ": " + w.cause.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.kind, w.cause} }
