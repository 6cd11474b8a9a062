package ring

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// orderEmitter records what a lane emits, in order.
type orderEmitter struct {
	chunks []emitted
	done   error
	ended  bool
}

type emitted struct {
	first byte // the chunk's first byte: which read it came from
	n     int
	flags srcs.Flags
}

func (e *orderEmitter) Emit(_ *contract.Lane, b *pool.Buf, n int, flags srcs.Flags, _ time.Time) {
	e.chunks = append(e.chunks, emitted{b.Bytes()[0], n, flags})
	b.Release()
}

func (e *orderEmitter) Finish(_ *contract.Lane, err error) { e.done, e.ended = err, true }

// fileRig is a worker with no ring and one file lane whose queue holds
// depth reads in flight, read k into a buffer whose first byte is k.
func fileRig(t *testing.T, depth int) (*worker, *lane, *orderEmitter, *pool.Pool) {
	t.Helper()
	p, err := pool.New(pool.Config{BufSize: 4096, Buffers: 16, MaxPerSource: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if st := p.Stats(); st.InUse != 0 {
			t.Errorf("%d buffers not returned", st.InUse)
		}
		p.Close()
	})
	r := &Runner{pool: p}
	w := &worker{r: r}
	w.SetGenMask(genMask)
	out := &orderEmitter{}
	l := &contract.Lane{ID: 1, Account: p.Join(1), Out: out}
	idx, gen := w.AllocSlot()
	ln := w.slots.Get(idx)
	*ln = lane{slot: idx, gen: gen, mode: modeFile, fa: &fileAhead{}, op: tagRead}
	ln.Driver.Reset(l, 0)
	w.live = 1
	for k := range depth {
		b, ok := l.Account.TryAcquire()
		if !ok {
			t.Fatal("no buffer")
		}
		b.Bytes()[0] = byte(k)
		ln.fa.q[k] = fileRead{buf: b, off: int64(k) * 4096, want: 4096, state: frInFlight}
	}
	ln.fa.n, ln.fa.inflight, ln.fa.next = depth, depth, int64(depth)*4096
	return w, ln, out, p
}

// TestFileReadsEmitInFileOrder completes a lane's reads in every order of
// four and checks that chunks come out in file order, each as soon as the
// reads before it are done.
func TestFileReadsEmitInFileOrder(t *testing.T) {
	perms := permutations([]int{0, 1, 2, 3})
	for _, perm := range perms {
		w, ln, out, _ := fileRig(t, 4)
		ln.removing = true // no new reads; Finish says srcs.ErrStopped
		for _, k := range perm {
			w.fileDone(ln, k, 4096)
		}
		if !out.ended || !errors.Is(out.done, srcs.ErrStopped) {
			t.Fatalf("order %v: lane did not finish: %v", perm, out.done)
		}
		if len(out.chunks) != 4 {
			t.Fatalf("order %v: %d chunks, want 4", perm, len(out.chunks))
		}
		for k, c := range out.chunks {
			if int(c.first) != k || c.n != 4096 || c.flags != 0 {
				t.Fatalf("order %v: chunk %d is %+v, want read %d whole", perm, k, c, k)
			}
		}
	}
}

// TestFileReadsShortReadMakesLaterStale: when read 1 of 4 comes back short
// (the file ended there, or shrank), reads 2 and 3 looked at the wrong
// place and are dropped whatever they returned, the next read starts where
// read 1 stopped, and a read returning 0 ends the lane with io.EOF.
func TestFileReadsShortReadMakesLaterStale(t *testing.T) {
	for _, perm := range permutations([]int{0, 1, 2, 3}) {
		w, ln, out, _ := fileRig(t, 4)
		ln.removing = false
		ln.fa.end = nil
		res := map[int]int32{0: 4096, 1: 100, 2: 4096, 3: 0}
		for _, k := range perm {
			w.fileDone(ln, k, res[k])
		}
		if len(out.chunks) != 2 || out.chunks[0] != (emitted{0, 4096, 0}) || out.chunks[1] != (emitted{1, 100, srcs.Partial}) {
			t.Fatalf("order %v: chunks %+v, want read 0 whole and 100 bytes of read 1", perm, out.chunks)
		}
		if ln.fa.next != 4096+100 {
			t.Fatalf("order %v: next read at %d, want %d", perm, ln.fa.next, 4096+100)
		}
		// The lane is queued to read on from there; it ends at EOF.
		if ln.fa.n != 0 || ln.fa.inflight != 0 || ln.op != tagNone {
			t.Fatalf("order %v: queue %d, in flight %d, op %v; want empty", perm, ln.fa.n, ln.fa.inflight, ln.op)
		}
		b, _ := ln.lane().Account.TryAcquire()
		ln.fa.q[0] = fileRead{buf: b, off: ln.fa.next, want: 4096, state: frInFlight}
		ln.fa.head, ln.fa.n, ln.fa.inflight, ln.op = 0, 1, 1, tagRead
		w.fileDone(ln, 0, 0)
		if !out.ended || !errors.Is(out.done, io.EOF) {
			t.Fatalf("order %v: lane ended %v with %v, want io.EOF", perm, out.ended, out.done)
		}
	}
}

// TestFileReadsErrorEndsAfterEarlierData: a read error delivers the reads
// before it and ends the lane with it once every read has come back.
func TestFileReadsErrorEndsAfterEarlierData(t *testing.T) {
	w, ln, out, _ := fileRig(t, 3)
	w.fileDone(ln, 2, 4096)
	w.fileDone(ln, 1, -5) // EIO
	if out.ended || len(out.chunks) != 0 {
		t.Fatalf("ended %v with %d chunks before read 0 came back", out.ended, len(out.chunks))
	}
	w.fileDone(ln, 0, 4096)
	if len(out.chunks) != 1 || out.chunks[0].first != 0 {
		t.Fatalf("chunks %+v, want read 0 only", out.chunks)
	}
	if !out.ended || out.done == nil || errors.Is(out.done, io.EOF) {
		t.Fatalf("lane ended %v with %v, want the read error", out.ended, out.done)
	}
}

func permutations(xs []int) [][]int {
	if len(xs) <= 1 {
		return [][]int{append([]int(nil), xs...)}
	}
	var out [][]int
	for i := range xs {
		rest := append(append([]int(nil), xs[:i]...), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{xs[i]}, p...))
		}
	}
	return out
}
