package engine

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// Totals are the engine's cumulative counters since New. Unlike the
// per-source figures in Stats, they never go down when a source ends, so
// they suit monitoring counters (rates over a scrape interval).
type Totals struct {
	// Bytes and Chunks count what the runners emitted into delivery;
	// Partials counts the chunks a flush timeout emitted part-full.
	Bytes    uint64
	Chunks   uint64
	Partials uint64
	// Delivered counts data chunks handed to a consumer (a handler or
	// Next); Delivered lags Chunks by what is queued.
	Delivered uint64
	// Errors counts source errors by kind (see ErrorKinds).
	Errors [NumErrorKinds]uint64
	// RecordsSkipped counts the records of framed sources skipped for
	// being too long, every one (the error handler sees one per source).
	RecordsSkipped uint64
	// IdleTimeouts counts the sources ended for delivering nothing for
	// their idle timeout (WithIdleTimeout).
	IdleTimeouts uint64
	// Latency is the delivery latency of data chunks: from their first
	// byte's arrival to the moment a consumer took them. It covers the
	// flush hold and the engine's queueing, nothing of the consumer.
	Latency LatencyHistogram
}

// Error kinds, the label values of a source error's kind.
//
// A clean end of stream (the peer closed the connection, a file ended) is
// not an error: it never reaches the ErrorHandler and is counted under no
// kind. It is the source's chunk flagged srcs.EndOfStream, whose Final
// says how the source ended (State Closed, no LastErr).
const (
	ErrorOpen = iota // Open failed (dial, subscribe, open(2))
	// ErrorEOF is never counted: a clean end of stream is not an error.
	// The kind stays so that the label set and the indices of the others
	// do not change.
	ErrorEOF
	ErrorReset    // connection reset
	ErrorTimeout  // a timeout
	ErrorDatagram // a datagram too large for a buffer was dropped
	ErrorRecord   // a framed record too long for its framer or a buffer
	ErrorOther    // any other read error
	NumErrorKinds
)

// ErrorKinds names the error kinds, indexed by the constants above.
var ErrorKinds = [NumErrorKinds]string{"open", "eof", "reset", "timeout", "datagram_too_large", "record_too_long", "other"}

func errorKind(op string, err error) int {
	switch {
	case op == "open":
		return ErrorOpen
	case errors.Is(err, srcs.ErrDatagramTooLarge):
		return ErrorDatagram
	case errors.Is(err, srcs.ErrRecordTooLong):
		return ErrorRecord
	case errors.Is(err, srcs.ErrReset):
		return ErrorReset
	case errors.Is(err, srcs.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded):
		return ErrorTimeout
	}
	return ErrorOther
}

// LatencyBounds are the upper bounds of the delivery latency buckets:
// powers of two from 16 µs to about 16 s. Recording is a bit-length
// computation and one atomic add, so it costs nothing per chunk that
// matters and allocates nothing.
var LatencyBounds = func() [latencyBuckets]time.Duration {
	var b [latencyBuckets]time.Duration
	for i := range b {
		b[i] = latencyBase << i
	}
	return b
}()

const (
	latencyBase    = 16 * time.Microsecond
	latencyBuckets = 21 // 16µs << 20 ≈ 16.8s
)

// LatencyHistogram is a snapshot of a latency histogram. Counts[i] is the
// number of observations at most LatencyBounds[i] and above the previous
// bound (not cumulative); Over counts those above the last bound.
type LatencyHistogram struct {
	Counts [latencyBuckets]uint64
	Over   uint64
	Count  uint64
	Sum    time.Duration
}

// totals is the live form of Totals. Safe for concurrent use; every method
// is a few atomic adds.
type totals struct {
	bytes, chunks, partials, delivered atomic.Uint64
	skipped                            atomic.Uint64
	idleTimeouts                       atomic.Uint64
	errs                               [NumErrorKinds]atomic.Uint64
	lat                                [latencyBuckets + 1]atomic.Uint64
	latCount                           atomic.Uint64
	latSum                             atomic.Int64
}

func (t *totals) emitted(n int, flags srcs.Flags) {
	t.bytes.Add(uint64(n))
	t.chunks.Add(1)
	if flags&srcs.Partial != 0 {
		t.partials.Add(1)
	}
}

func (t *totals) failed(op string, err error) { t.errs[errorKind(op, err)].Add(1) }

// took records a data chunk handed to a consumer at now.
func (t *totals) took(c *Chunk, now time.Time) {
	t.delivered.Add(1)
	if c.FirstByte.IsZero() {
		return
	}
	d := max(now.Sub(c.FirstByte), 0)
	i := 0
	if d > latencyBase {
		// The smallest i with d <= base<<i.
		q := uint64((d - 1) / latencyBase)
		for q > 0 {
			q >>= 1
			i++
		}
	}
	i = min(i, latencyBuckets)
	t.lat[i].Add(1)
	t.latCount.Add(1)
	t.latSum.Add(int64(d))
}

func (t *totals) snapshot() Totals {
	s := Totals{
		Bytes: t.bytes.Load(), Chunks: t.chunks.Load(), Partials: t.partials.Load(),
		Delivered: t.delivered.Load(), RecordsSkipped: t.skipped.Load(), IdleTimeouts: t.idleTimeouts.Load(),
	}
	for i := range t.errs {
		s.Errors[i] = t.errs[i].Load()
	}
	// Count and Sum first, buckets after: a concurrent observation may
	// then show in a bucket but not in Count, never the other way round,
	// and the exporter takes Count as the sum of the buckets anyway.
	s.Latency.Sum = time.Duration(t.latSum.Load())
	for i := range latencyBuckets {
		s.Latency.Counts[i] = t.lat[i].Load()
		s.Latency.Count += s.Latency.Counts[i]
	}
	s.Latency.Over = t.lat[latencyBuckets].Load()
	s.Latency.Count += s.Latency.Over
	return s
}

// Totals returns the engine's cumulative counters. Safe for concurrent
// use, cheap enough to call at every scrape.
func (e *Engine) Totals() Totals { return e.totals.snapshot() }
