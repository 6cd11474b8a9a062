// How a uring worker reads regular files: several reads in flight per
// file, emitted in order.

package ring

import (
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/runner/uring"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// fileDepth is how many reads a file lane keeps in flight, each into a
// buffer of its own, as fio does with iodepth. One read at a time made
// every 64 KiB wait for a whole loop turn and a hand-off to processing;
// with several, one io_uring_enter submits them all (page-cache reads
// complete at submission) and one turn emits them all. The pool's policy
// still bounds what a file holds: TryAcquire refuses past MaxPerSource,
// and while any other source waits for a buffer.
const fileDepth = 32

// A file lane's reads carry tagFileRead, and the read's place in the
// lane's queue in the top bits of the slot half of user_data.
const (
	tagFileRead  opTag = tagCancel + 1
	fileIdxShift       = 24
	slotMask           = 1<<fileIdxShift - 1 // workers never have more slots
)

// fileUserData is the user_data of read i of file lane ln.
func fileUserData(ln *lane, i int) uint64 {
	return uring.PackUserData(ln.slot|uint32(i)<<fileIdxShift, uint32(tagFileRead)<<genBits|ln.gen)
}

// fileRead is one read of a file lane's queue.
type fileRead struct {
	buf   *pool.Buf
	off   int64
	want  int
	res   int32
	state fileReadState
}

type fileReadState uint8

const (
	frFree     fileReadState = iota
	frInFlight               // submitted, no CQE yet
	frDone                   // completed; res holds the result
	frStale                  // issued past a short read or an end: dropped on completion
)

// fileAhead is a file lane's read-ahead: a ring of reads at consecutive
// offsets, emitted from head in file order whatever order they complete
// in. A short read ends the run of reads after it: they are dropped, and
// reading goes on from where the short one stopped, so a file that grows
// meanwhile is read exactly as a sequence of single reads would read it.
type fileAhead struct {
	q        [fileDepth]fileRead
	head     int       // oldest read not yet emitted
	n        int       // reads from head on that hold a buffer
	inflight int       // reads submitted and not completed
	next     int64     // offset of the next read to issue
	end      error     // io.EOF or a read error: issue no more; finish when drained
	grant    *pool.Buf // a buffer the pool granted the lane, for its next read
}

// advanceFile issues reads for a file lane until fileDepth are queued, the
// pool refuses a buffer, or the SQ is full. A file's reads are not held to
// a turn's budget of bytes (driver.Pace): page-cache reads complete at
// submission while processing checks earlier ones on another CPU, and a
// read-ahead cut to a turn's 512 KiB read files at 0.72x the throughput
// (decision 0023).
func (w *worker) advanceFile(ln *lane) {
	fa := ln.fa
	for fa.end == nil && fa.n < fileDepth {
		b := fa.grant
		if b != nil {
			fa.grant = nil // a granted buffer serves the next read
		} else if fa.n == 0 {
			// Nothing queued: wait for a buffer like any lane (the grant
			// enqueues the lane again).
			if !w.acquire(ln) {
				return
			}
			b, fa.grant = fa.grant, nil
		} else {
			var ok bool
			if b, ok = ln.lane().Account.TryAcquire(); !ok {
				return // a completion frees one, and advances us again
			}
		}
		s := w.sqe()
		if s == nil {
			fa.grant = b
			w.host.Enqueue(ln)
			return
		}
		i := (fa.head + fa.n) % fileDepth
		fr := &fa.q[i]
		*fr = fileRead{buf: b, off: fa.next, want: len(b.Bytes()), state: frInFlight}
		fa.next += int64(fr.want)
		fa.n++
		fa.inflight++
		s.PrepRead(int(ln.fd), fr.buf.Bytes(), uint64(fr.off))
		s.UserData = fileUserData(ln, i)
		ln.op = tagRead
		w.readsIssued = true
	}
}

// fileDone handles the completion of read i of a file lane.
func (w *worker) fileDone(ln *lane, i int, res int32) {
	fa := ln.fa
	fr := &fa.q[i]
	if fr.state != frInFlight && fr.state != frStale {
		return
	}
	fa.inflight--
	if fa.inflight == 0 {
		ln.op = tagNone
	}
	w.reads.Add(1)
	switch {
	case fr.state == frStale:
		fr.state = frDone
		fr.res = -int32(unix.ECANCELED)
	case res == -int32(unix.EAGAIN) || res == -int32(unix.EINTR):
		if !ln.removing && fa.end == nil {
			// Try the same read again, in the same place of the order.
			if s := w.sqe(); s != nil {
				s.PrepRead(int(ln.fd), fr.buf.Bytes(), uint64(fr.off))
				s.UserData = fileUserData(ln, i)
				fa.inflight++
				ln.op = tagRead
				w.readsIssued = true
				return
			}
		}
		fr.state, fr.res = frDone, res
	default:
		fr.state, fr.res = frDone, res
	}
	w.emitFileReads(ln)
	switch {
	case ln.removing:
		if fa.inflight == 0 {
			w.finish(ln, w.stopErr(ln))
		}
	case fa.end != nil:
		if fa.inflight == 0 {
			w.finish(ln, fa.end)
		}
	default:
		w.host.Enqueue(ln)
	}
}

// emitFileReads emits the completed reads at the head of ln's queue, in
// file order, up to the first read still in flight. A short read, an end
// or an error makes the reads after it stale; once the lane has ended,
// completed reads are released instead.
func (w *worker) emitFileReads(ln *lane) {
	fa := ln.fa
	for fa.n > 0 {
		fr := &fa.q[fa.head]
		if fr.state == frInFlight || fr.state == frStale {
			return
		}
		b, res, off := fr.buf, fr.res, fr.off
		*fr = fileRead{}
		fa.head = (fa.head + 1) % fileDepth
		fa.n--
		if fa.end != nil || res <= 0 {
			b.Release()
			switch {
			case fa.end != nil || res == -int32(unix.ECANCELED):
			case res == 0:
				fa.end = io.EOF
				w.staleFileReads(ln)
			default:
				fa.end = driver.Classify(os.NewSyscallError("read", unix.Errno(-res)))
				w.staleFileReads(ln)
			}
			continue
		}
		flags := srcs.Flags(0)
		if int(res) < len(b.Bytes()) {
			flags = srcs.Partial
			// The file ended inside this read, or shrank: the reads after
			// it looked at the wrong place. Go on from here.
			fa.next = off + int64(res)
			w.staleFileReads(ln)
		}
		ln.lane().Out.Emit(ln.lane(), b, int(res), flags, time.Now())
		w.host.Pace.Emitted(1)
	}
}

// staleFileReads makes every read left in ln's queue stale: a read in
// flight is dropped when it completes, a completed one when it reaches
// the head. New reads queue behind them, so file order holds.
func (w *worker) staleFileReads(ln *lane) {
	fa := ln.fa
	for k := range fa.n {
		fr := &fa.q[(fa.head+k)%fileDepth]
		switch fr.state {
		case frInFlight:
			fr.state = frStale
		case frDone:
			fr.res = -int32(unix.ECANCELED)
		}
	}
}

// releaseFileReads releases every buffer left in ln's queue. The kernel
// must be done with them: nothing of the lane may be in flight.
func (w *worker) releaseFileReads(ln *lane) {
	fa := ln.fa
	for k := range fa.n {
		fr := &fa.q[(fa.head+k)%fileDepth]
		if fr.buf != nil {
			fr.buf.Release()
		}
		*fr = fileRead{}
	}
	fa.n, fa.inflight = 0, 0
	if fa.grant != nil {
		fa.grant.Release()
		fa.grant = nil
	}
}

// abandonFile gives up the buffers of reads still in flight when the
// ring had to close anyway (see abandon), and releases the rest. It reports whether
// any buffer was abandoned.
func (w *worker) abandonFile(ln *lane) bool {
	fa := ln.fa
	leaked := false
	for k := range fa.n {
		fr := &fa.q[(fa.head+k)%fileDepth]
		if fr.state == frInFlight || fr.state == frStale {
			fr.buf = nil // the kernel may still write into it
			leaked = true
		}
	}
	w.releaseFileReads(ln)
	return leaked
}
