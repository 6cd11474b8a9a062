package driver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	rt "github.com/sluice-io/sluice/internal/testkit/recordtest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// The Lane tests run a lane as a runner would, with no kernel and no
// clock: reads are copies into Space, time is a variable.

// chunk is one emitted chunk, copied.
type chunk struct {
	data  []byte
	flags srcs.Flags
	first time.Time
}

// sink is a lane's Out: it keeps copies of the chunks and releases their
// buffers at once, and counts Finish calls.
type sink struct {
	chunks   []chunk
	finished int
	err      error
	skipped  []*srcs.RecordError
}

func (s *sink) Emit(_ *contract.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	s.chunks = append(s.chunks, chunk{bytes.Clone(b.Bytes()[:n]), flags, first})
	b.Release()
}

func (s *sink) EmitBytes(_ *contract.Lane, p []byte, flags srcs.Flags, first time.Time) {
	s.chunks = append(s.chunks, chunk{bytes.Clone(p), flags, first})
}

func (s *sink) Finish(_ *contract.Lane, err error) { s.finished++; s.err = err }

func (s *sink) RecordSkipped(_ *contract.Lane, err error) {
	s.skipped = append(s.skipped, err.(*srcs.RecordError))
}

// data returns every byte emitted, in order.
func (s *sink) data() []byte {
	var b []byte
	for _, c := range s.chunks {
		b = append(b, c.data...)
	}
	return b
}

type nameSrc struct{}

func (nameSrc) Open(context.Context) error { return nil }
func (nameSrc) Read([]byte) (int, error)   { return 0, io.EOF }
func (nameSrc) Close() error               { return nil }
func (nameSrc) Name() string               { return "test://lane" }

// smallDatagrams is a datagram source of at most 100-byte datagrams.
type smallDatagrams struct{ nameSrc }

func (smallDatagrams) MaxDatagram() int { return 100 }

// newLane returns a lane over a pool of buffers bufSize bytes long, framed
// by f (nil: raw), that may hold partial data for hold.
func newLane(t testing.TB, f srcs.Framer, bufSize, buffers int, hold time.Duration) (*Lane, *sink, *pool.Pool) {
	t.Helper()
	p, err := pool.New(pool.Config{BufSize: bufSize, Buffers: buffers, MaxPerSource: buffers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	s := &sink{}
	l := &contract.Lane{ID: 1, Src: nameSrc{}, Account: p.Join(1), Flush: hold, Framer: f, Out: s}
	var d Lane
	d.Reset(l, hold)
	return &d, s, p
}

// read gives the lane a buffer if it needs one and copies p into Space, as
// much as fits; it returns how much.
func read(t testing.TB, d *Lane, p []byte, now time.Time) int {
	t.Helper()
	if d.NeedsBuffer() {
		b, ok := d.Lane().Account.TryAcquire()
		if !ok {
			t.Fatal("the pool has no buffer for the lane")
		}
		d.Hold(b, now)
	}
	n := copy(d.Space(), p)
	st, err := d.Commit(n, now)
	if err != nil {
		t.Fatal(err)
	}
	if due, ok := d.Due(); st.HasDue != ok || !st.Due.Equal(due) {
		t.Fatalf("Commit's step has deadline %v (%v), the lane %v (%v)", st.Due, st.HasDue, due, ok)
	}
	lastStep = st
	return n
}

// lastStep is the Step of read's last Commit.
var lastStep Step

func TestLaneRaw(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const hold = 10 * time.Millisecond
	d, s, p := newLane(t, nil, 4096, 4, hold)
	if _, ok := d.Due(); ok {
		t.Fatal("an empty lane has a deadline")
	}
	read(t, d, []byte("abc"), t0)
	if due, ok := d.Due(); !ok || !due.Equal(t0.Add(hold)) {
		t.Fatalf("Due = %v, %v; want %v", due, ok, t0.Add(hold))
	}
	read(t, d, []byte("de"), t0.Add(5*time.Millisecond))
	// Partial data may go out within FlushSlack of its deadline (with
	// others that are due), not before.
	if slack := d.FlushSlack(); slack != hold/4 {
		t.Fatalf("FlushSlack = %v, want %v", slack, hold/4)
	}
	if d.FlushIfDue(t0.Add(hold - hold/4 - time.Nanosecond)) {
		t.Fatal("flushed before the deadline less its slack")
	}
	if !d.FlushIfDue(t0.Add(hold-hold/4)) || len(s.chunks) != 1 || string(s.chunks[0].data) != "abcde" ||
		s.chunks[0].flags != srcs.Partial || !s.chunks[0].first.Equal(t0) {
		t.Fatalf("within the slack of the deadline: %+v", s.chunks)
	}
	if d.Held() {
		t.Fatal("the lane kept a buffer after its flush")
	}
	// A full buffer goes out at once, not Partial.
	full := bytes.Repeat([]byte("x"), 4096)
	read(t, d, full, t0.Add(time.Second))
	if len(s.chunks) != 2 || len(s.chunks[1].data) != 4096 || s.chunks[1].flags != 0 || d.Held() {
		t.Fatalf("a full buffer: %d chunks, held %v", len(s.chunks), d.Held())
	}
	// Its step counts the flush before it too: every emit since the last.
	if lastStep.Emitted != 2 || lastStep.HasDue {
		t.Errorf("the full buffer's step: %+v, want 2 emitted and no deadline", lastStep)
	}
	// An empty buffer is flushed back to the pool.
	b, _ := d.Lane().Account.TryAcquire()
	d.Hold(b, t0)
	d.Flush(t0)
	read(t, d, []byte("tail"), t0.Add(2*time.Second))
	if want := t0.Add(2*time.Second + hold); lastStep.Emitted != 0 || !lastStep.HasDue || !lastStep.Due.Equal(want) {
		t.Errorf("a partial read's step: %+v, want none emitted and due at %v", lastStep, want)
	}
	if st := d.Settle(); st != lastStep {
		t.Errorf("Settle after the step: %+v, want %+v", st, lastStep)
	}
	d.Finish(io.EOF)
	if s.finished != 1 || s.err != io.EOF || string(s.chunks[2].data) != "tail" || s.chunks[2].flags != srcs.Partial {
		t.Fatalf("finish: %d finishes, err %v, chunks %+v", s.finished, s.err, s.chunks)
	}
	if st := p.Stats(); st.InUse != 0 {
		t.Fatalf("%d buffers still in use", st.InUse)
	}
}

// TestLaneNoHold: a lane whose runner cannot wake up for it emits every
// read at once and never has a deadline.
func TestLaneNoHold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d, s, _ := newLane(t, srcs.Newline{}, 4096, 4, 0)
	read(t, d, []byte("one\ntw"), t0)
	if len(s.chunks) != 1 || string(s.chunks[0].data) != "one\n" || s.chunks[0].flags != srcs.Partial|srcs.Records {
		t.Fatalf("chunks %+v", s.chunks)
	}
	if _, ok := d.Due(); ok {
		t.Fatal("a lane with no hold has a deadline")
	}
	d.Finish(io.EOF)
	if got := s.chunks[1]; string(got.data) != "tw" || got.flags != srcs.Partial|srcs.Records|srcs.Truncated {
		t.Fatalf("the last chunk: %+v", got)
	}
}

// TestLaneIdle: an idle lane gives its empty buffer back to the pool, and
// keeps one that holds data.
func TestLaneIdle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d, s, p := newLane(t, nil, 4096, 2, time.Second)
	d.Idle() // holds nothing: nothing to give back
	b, _ := d.Lane().Account.TryAcquire()
	d.Hold(b, t0)
	d.Idle()
	if d.Held() || p.Stats().InUse != 0 {
		t.Fatalf("an idle lane kept its empty buffer (held %v, %d in use)", d.Held(), p.Stats().InUse)
	}
	read(t, d, []byte("partial"), t0)
	d.Idle()
	if !d.Held() || d.Pending() != len("partial") || len(s.chunks) != 0 {
		t.Fatalf("Idle let go of held data: held %v, pending %d, chunks %d", d.Held(), d.Pending(), len(s.chunks))
	}
	d.Finish(io.EOF)
}

// TestLaneParks: part of a record that waited a flush timeout leaves the
// pool when it is at most contract.ParkMax bytes, and comes back with the
// lane's next buffer; a longer part keeps its buffer and sets no deadline
// (a deadline no flush can meet would make a runner spin).
func TestLaneParks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const hold = 10 * time.Millisecond
	for _, n := range []int{1, contract.ParkMax, contract.ParkMax + 1, 8000} {
		d, s, p := newLane(t, srcs.Newline{}, 8192, 4, hold)
		part := bytes.Repeat([]byte("p"), n)
		read(t, d, part, t0)
		due, ok := d.Due()
		parkable := n <= contract.ParkMax
		if ok != parkable || ok && !due.Equal(t0.Add(hold)) {
			t.Fatalf("%d bytes: Due = %v, %v; want a deadline %v", n, due, ok, parkable)
		}
		d.Flush(t0.Add(hold))
		inUse := 1 // the part keeps its buffer
		if parkable {
			inUse = 0
		}
		if d.Held() == parkable || p.Stats().InUse != inUse {
			t.Fatalf("%d bytes: held %v, %d in use after the flush", n, d.Held(), p.Stats().InUse)
		}
		t1 := t0.Add(time.Second)
		read(t, d, []byte("end\n"), t1)
		if due, ok := d.Due(); !ok || !due.Equal(t1.Add(hold)) {
			t.Fatalf("%d bytes: after the record's end, Due = %v, %v; want %v", n, due, ok, t1.Add(hold))
		}
		d.Finish(io.EOF)
		want := append(part, "end\n"...)
		if got := s.data(); !bytes.Equal(got, want) || len(s.chunks) != 1 || s.chunks[0].flags != srcs.Partial|srcs.Records {
			t.Fatalf("%d bytes: %d chunks, %d bytes, flags %v", n, len(s.chunks), len(got), s.chunks[0].flags)
		}
		if p.Stats().InUse != 0 {
			t.Fatalf("%d bytes: a buffer leaked", n)
		}
	}
}

// TestLaneCut: whole records wait with their full buffer while the pool
// has none for the tail, and go out when the runner brings one.
func TestLaneCut(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d, s, p := newLane(t, srcs.Newline{}, 4096, 2, time.Millisecond)
	hog, _ := p.Join(2).TryAcquire() // the pool's other buffer
	rec := append(bytes.Repeat([]byte("r"), 3000), '\n')
	read(t, d, rec, t0)
	read(t, d, bytes.Repeat([]byte("t"), 2000), t0) // fills the buffer inside a record
	if !d.Cutting() || !d.NeedsBuffer() || len(s.chunks) != 0 {
		t.Fatalf("cutting %v, chunks %d", d.Cutting(), len(s.chunks))
	}
	if _, ok := d.Due(); ok {
		t.Fatal("a lane waiting for a buffer to cut into has a deadline")
	}
	hog.Release()
	b, _ := d.Lane().Account.TryAcquire()
	t1 := t0.Add(time.Second)
	d.Hold(b, t1)
	if d.Cutting() || len(s.chunks) != 1 || !bytes.Equal(s.chunks[0].data, rec) || d.Pending() != 4096-len(rec) {
		t.Fatalf("after the cut: cutting %v, %d chunks, %d pending", d.Cutting(), len(s.chunks), d.Pending())
	}
	if due, ok := d.Due(); !ok || !due.Equal(t1.Add(time.Millisecond)) {
		t.Fatalf("the carried tail's deadline: %v, %v", due, ok)
	}
	d.Finish(io.EOF)
	if p.Stats().InUse != 0 || s.finished != 1 {
		t.Fatal("a buffer leaked, or Finish was not reported once")
	}
}

// TestLaneDatagrams: each commit is one datagram behind its length, a
// buffer goes out when the next datagram might not fit, and a dropped one
// leaves an idle lane without a buffer.
func TestLaneDatagrams(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p, err := pool.New(pool.Config{BufSize: 4096, Buffers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := &sink{}
	l := &contract.Lane{ID: 1, Src: smallDatagrams{}, Account: p.Join(1), Flush: time.Millisecond, Out: s}
	var d Lane
	d.ResetDatagram(l, time.Millisecond)
	b, _ := l.Account.TryAcquire()
	d.Hold(b, t0)
	d.Drop(9000, slog.New(slog.DiscardHandler), "test")
	if d.Held() {
		t.Fatal("an idle lane kept its buffer after a dropped datagram")
	}
	read(t, &d, []byte("hello"), t0)
	read(t, &d, nil, t0) // an empty datagram
	if len(s.chunks) != 0 {
		t.Fatal("a buffer with room for more datagrams went out")
	}
	// Fill the buffer until the next datagram might not fit.
	for d.Held() {
		read(t, &d, bytes.Repeat([]byte("d"), 100), t0)
	}
	d.Finish(io.EOF)
	var got []string
	srcs.ForEachDatagram(s.chunks[0].data, func(p []byte) bool { got = append(got, string(p)); return true })
	if len(s.chunks) != 1 || s.chunks[0].flags != srcs.Partial|srcs.Datagrams || len(got) < 3 || got[0] != "hello" || got[1] != "" {
		t.Fatalf("%d chunks, flags %v, %d datagrams", len(s.chunks), s.chunks[0].flags, len(got))
	}
	if len(s.chunks[0].data) > 4096 || 4096-len(s.chunks[0].data) >= 100+srcs.DatagramHeaderLen {
		t.Fatalf("a chunk of %d bytes: room was left for another datagram", len(s.chunks[0].data))
	}
}

// FuzzLane runs a framed lane the way a runner would over a stream of
// newline records of random sizes (some longer than contract.ParkMax, some
// longer than a buffer), read in random sizes at random times, with the
// runner waking at the lane's deadlines. After every step:
//
//   - the lane's deadline, if any, is in the future once the runner has
//     flushed what was due (a deadline in the past would make a runner
//     spin without reading);
//   - a lane holds at most its buffer and, while it cuts, one more.
//
// At the end every byte of every record that fits arrives once, in order,
// in chunks of whole records (but for a truncated tail), and every buffer
// is back in the pool.
func FuzzLane(f *testing.F) {
	f.Add(uint64(1), uint16(300), uint8(4), uint16(10))
	f.Add(uint64(2), uint16(9000), uint8(1), uint16(0))
	f.Add(uint64(3), uint16(5000), uint8(200), uint16(1))
	f.Add(uint64(4), uint16(9000), uint8(200), uint16(5))
	f.Fuzz(func(t *testing.T, seed uint64, maxRec uint16, maxGap uint8, holdMs uint16) {
		rng := rand.New(rand.NewPCG(seed, 7))
		const bufSize = 8192
		hold := time.Duration(holdMs%50) * time.Millisecond
		var stream []byte
		for len(stream) < 64<<10 {
			stream = append(stream, rt.Line(rng.IntN(int(maxRec)%12000+1), byte(len(stream)))...)
		}
		stream = append(stream, "unfinished"...)
		want := rt.Model(srcs.Newline{}, stream, bufSize)

		d, s, p := newLane(t, srcs.Newline{}, bufSize, 8, hold)
		now := time.Unix(1000, 0)
		for off := 0; off < len(stream); {
			// The runner wakes for a deadline before the next read, or
			// reads.
			gap := time.Duration(rng.IntN(int(maxGap)+1)) * time.Millisecond / 4
			if due, ok := d.Due(); ok && !due.After(now.Add(gap)) {
				now = due
				if !d.FlushIfDue(now) {
					t.Fatalf("at %v: the deadline %v passed and FlushIfDue did nothing", now, due)
				}
			} else {
				now = now.Add(gap)
				k := min(len(stream)-off, 1+rng.IntN(3*bufSize/2))
				off += read(t, d, stream[off:off+k], now)
			}
			if _, ok := d.Due(); ok {
				d.FlushIfDue(now)
				if due, ok := d.Due(); ok && !due.After(now) {
					t.Fatalf("at %v: deadline %v still due after a flush: a runner would spin", now, due)
				}
			}
			if held := p.Stats().InUse; held > 2 {
				t.Fatalf("the lane holds %d buffers", held)
			}
		}
		d.Finish(io.EOF)
		var records []byte
		for i, c := range s.chunks {
			_, whole, err := srcs.CountRecords(srcs.Newline{}, c.data)
			if err != nil || c.flags&srcs.Records == 0 || whole < len(c.data) && (c.flags&srcs.Truncated == 0 || i != len(s.chunks)-1) {
				t.Fatalf("chunk %d of %d bytes, flags %v: not whole records", i, len(c.data), c.flags)
			}
			records = append(records, c.data...)
		}
		if wantAll := append(bytes.Clone(want.Out), want.Tail...); !bytes.Equal(records, wantAll) {
			t.Fatalf("delivered %d bytes, want %d", len(records), len(wantAll))
		}
		if len(s.skipped) != len(want.Skipped) || s.finished != 1 {
			t.Fatalf("%d records skipped, want %d; %d finishes", len(s.skipped), len(want.Skipped), s.finished)
		}
		if p.Stats().InUse != 0 {
			t.Fatal("a buffer did not come home")
		}
	})
}

// batch is what a fake batched receive brought: sizes and cuts.
type batch struct {
	sizes []int
	cut   []bool
}

func (b *batch) Room(i int) int       { return i }
func (b *batch) Size(i int) int       { return b.sizes[i] }
func (b *batch) Truncated(i int) bool { return b.cut[i] }

// dropCounter is a sink that counts dropped datagrams.
type dropCounter struct {
	sink
	drops []int
}

func (c *dropCounter) DatagramDropped(_ *contract.Lane, size int) { c.drops = append(c.drops, size) }

// TestLaneDatagramBatch receives datagrams of random sizes several at a
// time, into the rooms DatagramBatch gives, some of them too long for
// their room: every datagram that fit arrives once, in order, whole, the
// others are reported dropped with their size, every buffer is filled
// until the next datagram might not fit, and every buffer comes home.
func TestLaneDatagramBatch(t *testing.T) {
	for _, hold := range []time.Duration{time.Millisecond, 0} {
		t0 := time.Unix(1000, 0)
		p, err := pool.New(pool.Config{BufSize: 4096, Buffers: 4, MaxPerSource: 4})
		if err != nil {
			t.Fatal(err)
		}
		out := &dropCounter{}
		l := &contract.Lane{ID: 1, Src: smallDatagrams{}, Account: p.Join(1), Flush: hold, Out: out}
		var d Lane
		d.ResetDatagram(l, hold)
		rng := rand.New(rand.NewPCG(1, uint64(hold)))
		var want []string
		var wantDrops []int
		seq := 0
		for range 400 {
			if !d.Held() {
				b, ok := l.Account.TryAcquire()
				if !ok {
					t.Fatal("no buffer for the lane")
				}
				d.Hold(b, t0)
			}
			room, stride, k := d.DatagramBatch()
			if room != 100 || stride != 100+srcs.DatagramHeaderLen {
				t.Fatalf("room %d stride %d, want 100 and %d", room, stride, 100+srcs.DatagramHeaderLen)
			}
			if hold == 0 && k != 1 {
				t.Fatalf("a lane that holds nothing is offered %d rooms", k)
			}
			rooms := d.Space()
			if (k-1)*stride+room > len(rooms) {
				t.Fatalf("%d rooms of %d do not fit in %d bytes", k, stride, len(rooms))
			}
			got := &batch{}
			for i := range 1 + rng.IntN(k) {
				size := rng.IntN(110) // some longer than the room
				msg := fmt.Sprintf("%04d", seq) + strings.Repeat("x", max(0, size-4))
				msg = msg[:size]
				seq++
				fits := room
				if i == k-1 {
					fits = len(rooms) - i*stride // the last room runs to the end
				}
				copy(rooms[i*stride:i*stride+min(size, fits)], msg)
				got.sizes, got.cut = append(got.sizes, size), append(got.cut, size > fits)
				if size > fits {
					wantDrops = append(wantDrops, size)
				} else {
					want = append(want, msg)
				}
			}
			d.CommitDatagrams(len(got.sizes), got, t0, slog.New(slog.DiscardHandler), "test")
			if d.Held() && d.Pending() == 0 {
				t.Fatal("an idle lane kept an empty buffer")
			}
		}
		d.Finish(io.EOF)
		var arrived []string
		for i, c := range out.chunks {
			if c.flags&srcs.Datagrams == 0 {
				t.Fatalf("a chunk without the Datagrams flag: %v", c.flags)
			}
			if err := srcs.ForEachDatagram(c.data, func(p []byte) bool { arrived = append(arrived, string(p)); return true }); err != nil {
				t.Fatal(err)
			}
			if hold > 0 && c.flags&srcs.Partial != 0 && i < len(out.chunks)-1 && 4096-len(c.data) >= stride(100) {
				t.Fatalf("a chunk of %d bytes went out with room for another datagram", len(c.data))
			}
		}
		if !slices.Equal(arrived, want) {
			t.Fatalf("hold %v: %d datagrams arrived, want %d (first difference at %d)", hold, len(arrived), len(want), firstDiff(arrived, want))
		}
		if !slices.Equal(out.drops, wantDrops) {
			t.Fatalf("hold %v: drops %v, want %v", hold, out.drops, wantDrops)
		}
		if st := p.Stats(); st.InUse != 0 {
			t.Fatalf("hold %v: %d buffers still held", hold, st.InUse)
		}
		p.Close()
	}
}

func stride(room int) int { return room + srcs.DatagramHeaderLen }

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
