package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// Chunk is a view of one filled pool buffer plus its metadata. Delivery
// copies nothing: Data aliases the pool's memory, so the consumer owns the
// chunk until it calls Release, and must not touch Data afterwards. A chunk
// may be handed between goroutines but not used by several at once.
//
// A Chunk is a value, and copies of it share one loan of the buffer:
// Release may be called on any copy, any number of times. The first call
// returns the buffer; later ones, on that copy or another, do nothing, even
// once the buffer holds another source's bytes. After the first, the Data
// of every copy is off limits.
type Chunk struct {
	// Source is the id AddSource returned, or that an accepted connection
	// was given.
	Source srcs.ID
	// Name is the source's address or path.
	Name string
	// Seq numbers the source's chunks from 0, with no gaps, across
	// reconnects; a session-end chunk takes a number of its own, and the
	// end-of-stream chunk the next one.
	Seq uint64
	// Flags: srcs.Partial, srcs.EndOfStream, srcs.Datagrams, and for a
	// framed source srcs.Records and srcs.Truncated.
	Flags srcs.Flags
	// Data holds the bytes, in the order the source produced them.
	Data []byte
	// FirstByte is when the first byte of Data arrived; Emitted is when
	// the runner handed the chunk to delivery.
	FirstByte time.Time
	Emitted   time.Time
	// Final is set on the end-of-stream chunk: the source's counters at
	// its end (bytes, chunks, errors, records skipped), in order behind
	// everything the source delivered, so a consumer can close its books
	// on the source without polling Stats. Its State is Closed for a
	// clean end (with no LastErr), or Failed with the error that ended
	// the source. It is set on a session-end chunk too, with the counters
	// at the session's end, and the session's own end: Closed when the
	// peer ended it cleanly, Failed with the error that ended it.
	Final *SourceStats
	// SessionEnd marks the empty chunk that ends a session of a source
	// that then opens again (a reconnecting client's connection, a
	// repeated file's pass), for sources added WithSessionEnds: the next
	// chunks come from a new session. Whatever ended the session, an
	// error or the peer's clean close, reached the error handler (an
	// error) before it. The source's last session ends with the
	// end-of-stream chunk instead.
	SessionEnd bool

	src   *source // its source, for State
	buf   *pool.Buf
	lease uint64 // buf's lease when the chunk was emitted
	// heap marks a data chunk whose bytes live outside the pool: the part
	// of a record a framed lane ended with when no buffer was free.
	heap bool
	// For sources that observe releases: the chunk's place among the
	// source's data chunks, and the stream offset just past its bytes.
	rel  *releases
	dseq uint64
	end  int64
}

// State returns the value WithSourceState made for the chunk's source, or
// nil. It is the same value on every chunk of the source, its
// end-of-stream chunk included.
func (c Chunk) State() any {
	if c.src == nil {
		return nil
	}
	if cold := c.src.cold.Load(); cold != nil {
		return cold.user
	}
	return nil
}

// Offset returns where the chunk's bytes start in its source's stream, as
// srcs.ReleaseObserver counts it (the source's bytes delivered and
// skipped before them), and whether it is known: it is for a data chunk
// of a source that observes its releases, until the chunk is released.
func (c Chunk) Offset() (int64, bool) {
	return c.end - int64(len(c.Data)), c.end > 0 && len(c.Data) > 0
}

// Release returns the chunk's buffer to the source pool. It is safe on
// any copy of the chunk and idempotent: see Chunk.
func (c *Chunk) Release() {
	if !c.data() {
		return
	}
	freed := true
	if c.buf != nil {
		freed = c.buf.ReleaseLease(c.lease)
	}
	rel := c.rel
	c.buf, c.heap, c.rel = nil, false, nil
	c.Data = nil
	if freed && rel != nil {
		rel.done(c.dseq, c.end)
	}
}

// data reports whether the chunk holds data not yet released.
func (c *Chunk) data() bool { return c.buf != nil || c.heap }

// releases tells a srcs.ReleaseObserver, in order, how far its stream has
// been released. Chunks may be released in any order; an early one waits
// in pending until the chunks before it are released. Safe for concurrent
// use.
type releases struct {
	obs srcs.ReleaseObserver

	mu      sync.Mutex
	next    uint64           // the data chunk whose release moves the mark
	pending map[uint64]int64 // released early: dseq -> end offset
}

func (r *releases) done(dseq uint64, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if dseq < r.next {
		return // a copy of a chunk released already (one outside the pool)
	}
	if dseq != r.next {
		if r.pending == nil {
			r.pending = map[uint64]int64{}
		}
		r.pending[dseq] = end
		return
	}
	r.next++
	for {
		e, ok := r.pending[r.next]
		if !ok {
			break
		}
		delete(r.pending, r.next)
		end = e
		r.next++
	}
	// Under the lock, so that calls arrive in order.
	r.obs.Released(end)
}

// item is one entry of a delivery queue: a chunk, or an error of the
// source that comes after its chunks.
type item struct {
	chunk Chunk
	err   error // non-nil: an error event, chunk carries only Source and Name
	src   *source
}

// queue is an unbounded FIFO with a wake-up channel. Its length is bounded
// in practice by the pool (every data chunk holds a buffer) plus a few
// events per source. Safe for concurrent use.
type queue struct {
	hold    *wakeHold   // nil: never held
	pending atomic.Bool // a push found wake-ups held: release signals

	mu     sync.Mutex
	items  []item // ring buffer
	head   int
	n      int
	popped uint64 // items taken, for a Shutdown that waits for a reader
	closed bool
	ready  chan struct{} // capacity 1: "the queue may have items"
	done   chan struct{} // closed by close: wakes every waiter at once
}

func newQueue(h *wakeHold) *queue {
	return &queue{hold: h, items: make([]item, 64), ready: make(chan struct{}, 1), done: make(chan struct{})}
}

func (q *queue) push(it item) {
	q.mu.Lock()
	if q.n == len(q.items) {
		grown := make([]item, 2*len(q.items))
		for i := range q.n {
			grown[i] = q.items[(q.head+i)%len(q.items)]
		}
		q.items, q.head = grown, 0
	}
	q.items[(q.head+q.n)%len(q.items)] = it
	q.n++
	q.mu.Unlock()
	q.wake()
}

// wake signals a consumer, or leaves the signal to the release of the
// wake-ups held now. Storing pending before the second look at the holds
// pairs with wakeHold.ReleaseWakeups, which drops the count before it
// scans: one of the two always sees the other, so no wake-up is lost.
func (q *queue) wake() {
	if q.hold == nil || q.hold.n.Load() == 0 {
		q.signal()
		return
	}
	q.pending.Store(true)
	if q.hold.n.Load() == 0 && q.pending.Swap(false) {
		q.signal()
	}
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop returns the oldest item. ok is false when the queue is empty; done is
// true when it is also closed.
func (q *queue) pop() (it item, ok, done bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return item{}, false, q.closed
	}
	it = q.items[q.head]
	q.items[q.head] = item{}
	q.head = (q.head + 1) % len(q.items)
	q.n--
	q.popped++
	if q.n > 0 {
		// Several consumers may wait; pass the wake-up on.
		q.signal()
	}
	return it, true, false
}

// count returns the data chunks and the source errors (not notices such
// as ErrReconnected) waiting in q, and how many items were taken so far.
func (q *queue) count() (data, failures int, popped uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	popped = q.popped
	for i := range q.n {
		it := &q.items[(q.head+i)%len(q.items)]
		switch {
		case it.err != nil && !errors.Is(it.err, ErrReconnected):
			failures++
		case it.chunk.data():
			data++
		}
	}
	return data, failures, popped
}

func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}

// wakeHold is the engine's contract.WakeupHolder: while any runner worker
// holds, pushes mark their queue pending instead of waking a consumer, and
// the last release wakes each pending queue once. Safe for concurrent use.
type wakeHold struct {
	n      atomic.Int32
	shards []*queue // fixed before any runner starts
}

func (h *wakeHold) HoldWakeups() { h.n.Add(1) }

func (h *wakeHold) ReleaseWakeups() {
	if h.n.Add(-1) != 0 {
		return
	}
	for _, q := range h.shards {
		if q.pending.Swap(false) {
			q.signal()
		}
	}
}

// flow applies the delivery watermarks: above high undelivered chunks the
// runners pause, and at or below low they resume (so a low mark of zero
// still resumes once the queue is empty). Safe for concurrent use.
type flow struct {
	high, low int64
	setPaused func(bool)

	mu     sync.Mutex
	depth  int64
	paused bool
	pauses uint64
}

func (f *flow) add(delta int64) {
	f.mu.Lock()
	f.depth += delta
	switch {
	case !f.paused && f.depth > f.high:
		f.paused = true
		f.pauses++
		f.setPaused(true)
	case f.paused && f.depth <= f.low:
		f.paused = false
		f.setPaused(false)
	}
	f.mu.Unlock()
}

func (f *flow) snapshot() (depth int64, paused bool, pauses uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.depth, f.paused, f.pauses
}
