package driver

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
)

// hostLane is a backend's lane as the host sees it.
type hostLane struct {
	Seat[*hostLane]
	id int
}

// countOut counts the chunks emitted and releases their buffers.
type countOut struct{ chunks, bytes int }

func (o *countOut) Emit(_ *contract.Lane, b *pool.Buf, n int, _ contract.Flags, _ time.Time) {
	o.chunks++
	o.bytes += n
	b.Release()
}

func (o *countOut) Finish(*contract.Lane, error) {}

// hostRig is a Host over a real pool, with the backend's calls recorded.
type hostRig struct {
	h       Host[*hostLane]
	pool    *pool.Pool
	out     countOut
	posted  []uint64
	served  []int
	flushed []int
	stopAt  int // Serve stops after this many lanes (0: never)
}

func newHostRig(t *testing.T, buffers int) *hostRig {
	t.Helper()
	p, err := pool.New(pool.Config{BufSize: 4096, Buffers: buffers, MaxPerSource: buffers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	r := &hostRig{pool: p}
	r.h.Init(NewPace(contract.RunnerConfig{Inline: true}),
		func(tok uint64) { r.posted = append(r.posted, tok) },
		func() bool { return r.stopAt > 0 && len(r.served) >= r.stopAt },
		func(ln *hostLane) { r.served = append(r.served, ln.id) },
		func(ln *hostLane, _ time.Time) { r.flushed = append(r.flushed, ln.id) })
	return r
}

// lane returns a raw lane that holds partial data for hold.
func (r *hostRig) lane(id int, hold time.Duration) *hostLane {
	ln := &hostLane{id: id}
	l := &contract.Lane{ID: pool.SourceID(id), Account: r.pool.Join(pool.SourceID(id)), Flush: hold, Out: &r.out}
	ln.Driver.Reset(l, hold)
	return ln
}

// serve runs a turn and returns the lanes it served.
func (r *hostRig) serve() (served []int, left bool) {
	r.served = r.served[:0]
	left = r.h.Serve()
	return slices.Clone(r.served), left
}

// TestHostLine: a light socket (its last read brought at most LightRead)
// is served before the ready queue, a lane stands in line once, a waiting
// lane stays out until its grant, a lane that left the line is skipped,
// and a stop leaves the rest for the next turn.
func TestHostLine(t *testing.T) {
	r := newHostRig(t, 4)
	a, b, c, d := r.lane(1, 0), r.lane(2, 0), r.lane(3, 0), r.lane(4, 0)
	r.h.Enqueue(a)
	r.h.Enqueue(a)
	b.Last = LightRead
	r.h.Readable(b, true)
	c.Last = LightRead + 1 // a full read: not light
	r.h.Readable(c, true)
	d.waiting = true
	r.h.Readable(d, true)
	if r.h.Lined() != 3 || !a.queued || d.queued {
		t.Fatalf("%d in line (a queued %v, d queued %v), want a, b and c", r.h.Lined(), a.queued, d.queued)
	}
	if got, left := r.serve(); left || !slices.Equal(got, []int{2, 1, 3}) {
		t.Fatalf("served %v (left %v), want [2 1 3]", got, left)
	}

	r.h.Enqueue(a)
	r.h.Enqueue(b)
	r.h.Enqueue(c)
	a.queued = false // a command advanced it meanwhile
	r.stopAt = 1
	if got, left := r.serve(); !left || !slices.Equal(got, []int{2}) {
		t.Fatalf("a turn of one served %v (left %v), want [2] and the rest left", got, left)
	}
	r.stopAt = 0
	if got, _ := r.serve(); !slices.Equal(got, []int{3}) {
		t.Fatalf("the next turn served %v, want [3]", got)
	}
}

// TestHostRequeue: where a lane stands after its read (the function
// Requeue's table, here through the line): a drained socket first, one
// still holding data read again first up to DrainReads times, then the
// back of the queue.
func TestHostRequeue(t *testing.T) {
	r := newHostRig(t, 4)
	a, b := r.lane(1, 0), r.lane(2, 0)
	r.h.Enqueue(b)
	r.h.Requeue(a, true, false)
	if got, _ := r.serve(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("served %v, want the drained socket first", got)
	}
	for i := range DrainReads {
		r.h.Enqueue(b)
		r.h.Requeue(a, false, true)
		if got, _ := r.serve(); !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("read %d of a draining socket: served %v, want it first", i+1, got)
		}
	}
	r.h.Enqueue(b)
	r.h.Requeue(a, false, true)
	if got, _ := r.serve(); !slices.Equal(got, []int{2, 1}) {
		t.Fatalf("after %d reads in a row: served %v, want the socket at the back", DrainReads, got)
	}
	r.h.Requeue(a, false, true)
	r.h.Drained(a)
	r.h.Requeue(a, false, true) // already in line: keeps its place
	if r.h.Lined() != 1 || a.streak != 0 {
		t.Fatalf("%d in line, streak %d; want one entry and no streak", r.h.Lined(), a.streak)
	}
}

// TestHostBuffers: Commit hands the bytes to the driver and keeps the
// lane in the flush heap at its deadline; FlushDue hands the due lane to
// the backend; Acquire from an empty pool waits and counts the lane
// starved, its grant is posted with its token, and Collect takes the
// buffer, or gives it back while paused; Leave takes a lane out of the
// books.
func TestHostBuffers(t *testing.T) {
	r := newHostRig(t, 1)
	t0 := time.Unix(1000, 0)
	a, b := r.lane(1, time.Second), r.lane(2, time.Second)
	buf, err := r.h.Acquire(a, 11)
	if err != nil || buf == nil {
		t.Fatalf("Acquire from a free pool: %v, %v", buf, err)
	}
	r.h.Hold(a, buf, t0)
	n := copy(a.Driver.Space(), "partial")
	if err := r.h.Commit(a, n, t0); err != nil {
		t.Fatal(err)
	}
	if wait, ok := r.h.NextFlush(t0); !ok || wait != time.Second {
		t.Fatalf("NextFlush = %v, %v; want the lane's hold, 1s", wait, ok)
	}
	r.h.FlushDue(t0.Add(time.Second / 2))
	if len(r.flushed) != 0 {
		t.Fatalf("flushed %v half a hold early", r.flushed)
	}
	r.h.FlushDue(t0.Add(time.Second))
	if !slices.Equal(r.flushed, []int{1}) {
		t.Fatalf("flushed %v at the deadline, want [1]", r.flushed)
	}
	if _, ok := r.h.NextFlush(t0); ok {
		t.Fatal("the flushed lane is still in the heap")
	}

	got, err := r.h.Acquire(b, 22)
	if err != nil || got != nil || !b.Waiting() || r.h.Starved != 1 {
		t.Fatalf("Acquire from an empty pool: %v, %v (waiting %v, starved %d)", got, err, b.Waiting(), r.h.Starved)
	}
	if _, done, _ := r.h.Collect(a, 11, false); done {
		t.Fatal("Collect for a lane that does not wait took something")
	}
	a.Driver.Flush(t0.Add(time.Second))
	r.h.Settle(a)
	if r.out.chunks != 1 || r.out.bytes != n || !slices.Equal(r.posted, []uint64{22}) {
		t.Fatalf("after the flush: %d chunks of %d bytes, posted %v; want one of %d, and b's grant", r.out.chunks, r.out.bytes, r.posted, n)
	}
	got, done, err := r.h.Collect(b, 22, true)
	if err != nil || !done || got != nil || b.Waiting() || r.h.Starved != 0 || r.pool.Stats().InUse != 0 {
		t.Fatalf("Collect while paused: %v, done %v, %v (waiting %v, starved %d, %d in use); want the buffer back in the pool",
			got, done, err, b.Waiting(), r.h.Starved, r.pool.Stats().InUse)
	}

	if buf, err := r.h.Acquire(a, 11); err != nil || buf == nil {
		t.Fatalf("Acquire from a free pool: %v, %v", buf, err)
	} else {
		r.h.Hold(a, buf, t0)
	}
	if buf, _ := r.h.Acquire(b, 22); buf != nil || r.h.Starved != 1 {
		t.Fatalf("Acquire from an empty pool: %v, starved %d", buf, r.h.Starved)
	}
	r.h.Leave(b)
	if b.Waiting() || r.h.Starved != 0 {
		t.Fatalf("Leave kept a waiting lane in the books: waiting %v, starved %d", b.Waiting(), r.h.Starved)
	}
	b.Driver.Finish(nil) // withdraws the pool wait
	a.Driver.Finish(nil)
	if st := r.pool.Stats(); st.InUse != 0 || st.Waiters != 0 {
		t.Fatalf("after both lanes finished: %d in use, %d waiting", st.InUse, st.Waiters)
	}
}

// TestHostNoAllocations: a turn's service and a read's commit allocate
// nothing once the line has grown.
func TestHostNoAllocations(t *testing.T) {
	r := newHostRig(t, 4)
	a := r.lane(1, time.Second)
	t0 := time.Unix(1000, 0)
	buf, _ := r.h.Acquire(a, 1)
	r.h.Hold(a, buf, t0)
	allocs := testing.AllocsPerRun(100, func() {
		r.h.Enqueue(a)
		r.served = r.served[:0]
		r.h.Serve()
		_ = r.h.Commit(a, 1, t0)
		r.h.Requeue(a, false, true)
		r.h.Serve()
	})
	if allocs != 0 {
		t.Fatalf("a turn allocated %v times", allocs)
	}
	a.Driver.Finish(nil)
}

// TestHostCompleted: a completed read's one call commits its bytes,
// remembers what the read brought, and stands the lane in line: a drained
// socket first, a draining one next, ahead of the ready queue.
func TestHostCompleted(t *testing.T) {
	r := newHostRig(t, 4)
	t0 := time.Unix(1000, 0)
	a, b, c := r.lane(1, 0), r.lane(2, 0), r.lane(3, 0)
	r.h.Enqueue(c)
	for i, ln := range []*hostLane{a, b} {
		buf, err := r.h.Acquire(ln, uint64(i+1))
		if err != nil || buf == nil {
			t.Fatalf("Acquire: %v, %v", buf, err)
		}
		r.h.Hold(ln, buf, t0)
	}
	if err := r.h.Completed(b, 100, t0, false, true); err != nil {
		t.Fatal(err)
	}
	if err := r.h.Completed(a, 10, t0, true, false); err != nil {
		t.Fatal(err)
	}
	if a.Last != 10 || b.Last != 100 || r.out.chunks != 2 || r.out.bytes != 110 {
		t.Fatalf("Last %d and %d, %d chunks of %d bytes; want 10 and 100, two chunks of 110 (no hold: emitted at once)",
			a.Last, b.Last, r.out.chunks, r.out.bytes)
	}
	if got, _ := r.serve(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("served %v, want the drained socket, the draining one, then the queue", got)
	}
	a.Driver.Finish(nil)
	b.Driver.Finish(nil)
}
