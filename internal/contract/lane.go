package contract

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-io/sluice/pool"
)

// Source is srcs.Source: the four methods every source implements. A
// value of either interface type is assignable to the other.
type Source interface {
	Name() string
	Open(ctx context.Context) error
	Read(p []byte) (int, error)
	Close() error
}

// Framer is srcs.Framer: a value without state that finds record
// boundaries (see srcs.Framer for what Next returns).
type Framer interface {
	Next(p []byte, seen, limit int) (int, error)
	String() string
}

// Flags describe a chunk. srcs.Flags names this type, and srcs documents
// each flag for users.
type Flags uint8

const (
	// Partial marks a buffer emitted before it was full: the flush timeout
	// fired, the source stopped, or an error or end of stream followed.
	Partial Flags = 1 << iota
	// EndOfStream marks the empty chunk that follows a source's last data.
	EndOfStream
	// Datagrams marks a buffer that holds whole datagrams, each behind a
	// 4-byte little-endian length (see srcs.ForEachDatagram).
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
// backpressure reaches runners through the runner's SetPaused and the pool.
type Emitter interface {
	// Emit hands a filled buffer downstream: n bytes of b.Bytes() are
	// valid, and first is when the first of them arrived (for a framed
	// lane: when its first record was complete). Ownership of b passes to
	// the emitter. n is never zero.
	Emit(l *Lane, b *pool.Buf, n int, flags Flags, first time.Time)
	// Finish reports that the runner has stopped driving the lane and will
	// not touch its source or descriptor again. err is io.EOF at end of
	// stream, srcs.ErrStopped after the runner's Remove, or what went
	// wrong. Finish is called exactly once per Add, after the lane's last
	// Emit, and the runner holds no buffer of the lane's account by then.
	Finish(l *Lane, err error)
}

// Lane is one opened source as a runner drives it. The engine creates a
// lane, opens its source, and hands it to exactly one runner with Add. The
// runner reads into buffers from Account, emits them through Out, and calls
// Out.Finish once when it stops. The fields but Runner are set before Add
// and are read-only afterwards.
type Lane struct {
	ID      pool.SourceID
	Src     Source
	Account *pool.Account
	// Flush bounds how long a partly filled buffer is held: after Flush
	// since its first byte, the runner emits it with the Partial flag.
	// Zero means emit after every read.
	Flush time.Duration
	// Framer, when set, frames the lane's stream into records: chunks end
	// on record boundaries and carry the Records flag. Nil means raw
	// bytes. Datagram lanes are never framed.
	Framer Framer
	Out    Emitter
	// Runner belongs to the runner that drives the lane, which keeps its
	// handle on the lane here rather than in a table of its own (a map
	// entry per connection): the event-loop runners keep the worker and
	// the token (internal/runner/front.Table). Zero while no runner drives the
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

// ParkMax bounds the part of a record an idle framed lane keeps outside the
// pool: a lane that has held only part of a record for a flush timeout
// gives its buffer back and keeps the part, up to ParkMax bytes, until its
// next buffer. A longer part keeps its buffer.
const ParkMax = 4 << 10

// BytesEmitter is the optional capability of an Emitter that can take
// bytes held outside the pool. A framed lane that ends while part of a
// record waits outside the pool (see ParkMax), and finds no buffer free,
// hands the part over this way rather than lose it. The emitter takes
// data; the runner does not touch it again.
type BytesEmitter interface {
	EmitBytes(l *Lane, data []byte, flags Flags, first time.Time)
}

// SkipCounter is the optional capability of an Emitter that counts the
// bytes framed lanes drop while they skip a record, so that stream offsets
// (srcs.ReleaseObserver, srcs.ChunkObserver) go on counting every byte the
// source sent. A runner calls it on the lane's goroutine, after the Emit
// of the records before the skipped bytes only when those went out first:
// the skipped bytes lie before the end of the lane's next chunk.
type SkipCounter interface {
	BytesSkipped(l *Lane, n int)
}

// RecordReporter is the optional capability of an Emitter that counts and
// reports the records a lane skipped: err is the framer's
// *srcs.RecordError. A runner's lane machine calls it on the lane's
// goroutine, in order with its Emits.
type RecordReporter interface {
	RecordSkipped(l *Lane, err error)
}

// DatagramDropReporter is the optional capability of an Emitter that counts
// datagrams a runner dropped because they did not fit the room their
// receive was given (a datagram larger than a buffer). Runners call it on the
// lane's worker, between Emits, and keep the lane running; like Emit it must
// not block. size is the datagram's length when the runner learned it, else
// a lower bound: the room it was given plus one.
type DatagramDropReporter interface {
	DatagramDropped(l *Lane, size int)
}

// A WholeFramer is a Framer that can step over many records at once,
// which costs less than one call of Next per record when records are
// short. Runners use it in place of Next when a framer has it.
type WholeFramer interface {
	// Whole returns the length of a prefix of p made of one or more whole
	// records, as Next called from record to record would split them
	// without an error, and the caller goes on from there. When p's first
	// record is not whole it returns what Next returns for p: 0, with the
	// error when the record is bad. p, seen and limit are as for Next.
	Whole(p []byte, seen, limit int) (int, error)
}

// A Resyncer is a Framer that can find the next record boundary in the
// middle of a record, which lets a runner skip a record that is too long
// without ending the lane.
type Resyncer interface {
	// Resync returns how many bytes of p lie before the next record
	// boundary, and ok false when p holds none (all of p belongs to the
	// record being skipped).
	Resync(p []byte) (n int, ok bool)
}

// ErrFramedDatagrams refuses a framer on a datagram lane: datagrams keep
// their own boundaries (see srcs.ForEachDatagram).
var ErrFramedDatagrams = errors.New("srcs: framing applies to streams and files, not datagrams")

// CheckFraming returns an error when l has a framer its descriptor kind
// cannot take. Runners call it when they add a lane.
func CheckFraming(l *Lane, k Kind) error {
	if l.Framer != nil && k == Datagram {
		return fmt.Errorf("lane %d (%s): framing %s: %w", l.ID, l.Name(), l.Framer, ErrFramedDatagrams)
	}
	return nil
}
