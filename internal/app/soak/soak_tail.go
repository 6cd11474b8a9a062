package soak

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

const (
	tailMaxLine = 4096
	tailTick    = 10 * time.Millisecond
	// tailRenameLag is how long the writer goes on writing to a file
	// after it was renamed away, before it opens a new one at the path,
	// as a logger does between the rename and its reopen.
	tailRenameLag = 200 * time.Millisecond
	tailKeep      = 2 // rotated files kept; older ones are removed
)

// tailLine appends line seq to b: the number, a space, (seq*7)%120
// letters that depend on seq, and a newline.
func tailLine(b []byte, seq uint64) []byte {
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, ' ')
	c := byte('a' + seq%26)
	for range (seq * 7) % 120 {
		b = append(b, c)
	}
	return append(b, '\n')
}

// tailLoad writes numbered lines to the tailed file at TailRate, and
// rotates it every Rotate, alternately:
//
//   - by rename: the file is renamed away, the writer goes on writing to
//     it for tailRenameLag, then creates a new file at the path and
//     writes there. The tail finishes the old file once the new one
//     appears (srcs.Tail), and the writer wrote its last line to the old
//     file before creating the new one, so no line is lost.
//   - by copytruncate: the file is copied while the writer goes on
//     writing; then the writer holds its next write, waits until the
//     engine has delivered every line written, truncates the file, waits
//     until the tail has seen the truncation (Tail.Truncations), and goes
//     on. A tail cannot read lines written after its last read and
//     before a truncate, nor tell a truncated file that regrew past its
//     offset from growth (srcs.Tail's documentation), so without the hold
//     a copytruncate loses lines by design; with it, none may be lost.
//
// Either rotation starts only once the engine has delivered the lines
// written when it became due: a file renamed away again before the tail
// reached it is skipped, as tail -F does, and the soak checks the tail
// against the losses it promises not to make.
type tailLoad struct {
	path   string
	rate   float64
	rotate time.Duration
	settle time.Duration
	tail   *srcs.Tail
	chk    *tailCheck
	failf  func(string, ...any)

	written    atomic.Uint64 // lines written: the next line's number
	renames    atomic.Uint64
	copyTruncs atomic.Uint64

	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func startTailLoad(c Config, path string, tail *srcs.Tail, chk *tailCheck, failf func(string, ...any)) *tailLoad {
	l := &tailLoad{path: path, rate: c.TailRate, rotate: c.Rotate, settle: c.Settle, tail: tail, chk: chk, failf: failf,
		done: make(chan struct{})}
	l.wg.Go(l.run)
	return l
}

func (l *tailLoad) stop() {
	l.once.Do(func() { close(l.done) })
	l.wg.Wait()
}

// delivered says whether the engine has delivered every line below n.
func (l *tailLoad) delivered(n uint64) bool { return l.chk.next.Load() >= n }

func (l *tailLoad) run() {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		l.failf("tail: open the file to write: %v", err)
		return
	}
	defer func() { f.Close() }()
	var (
		buf      []byte
		start    = time.Now()
		nextRot  = start.Add(l.rotate)
		rotDue   = uint64(0) // lines written when the rotation became due
		dueSince time.Time
		rots     int
		rotated  []string
		reopenAt time.Time  // a rename is in flight until then
		copied   chan error // a copytruncate's copy is in flight
		stalled  bool       // the tail fell behind; rotations stopped
		tick     = time.NewTicker(tailTick)
	)
	defer tick.Stop()
	reopen := func() bool {
		nf, err := os.OpenFile(l.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			l.failf("tail: create the new file after a rename: %v", err)
			return false
		}
		f.Close()
		f = nf
		reopenAt = time.Time{}
		l.renames.Add(1)
		return true
	}
	for {
		var now time.Time
		select {
		case <-l.done:
			if !reopenAt.IsZero() {
				reopen()
			}
			if copied != nil {
				<-copied
			}
			return
		case err := <-copied:
			copied = nil
			if err != nil {
				l.failf("tail: copy for copytruncate: %v", err)
				continue
			}
			l.truncate(f)
			continue
		case now = <-tick.C:
		}
		if due := uint64(l.rate * now.Sub(start).Seconds()); due > l.written.Load() {
			buf = buf[:0]
			for seq := l.written.Load(); seq < due; seq++ {
				buf = tailLine(buf, seq)
			}
			if _, err := f.Write(buf); err != nil {
				l.failf("tail: write: %v", err)
				return
			}
			l.written.Store(due)
		}
		if !reopenAt.IsZero() && now.After(reopenAt) && !reopen() {
			return
		}
		if stalled || !reopenAt.IsZero() || copied != nil || now.Before(nextRot) {
			continue
		}
		if dueSince.IsZero() {
			dueSince, rotDue = now, l.written.Load()
		}
		if !l.delivered(rotDue) {
			if now.Sub(dueSince) > l.settle {
				l.failf("tail: the engine delivered up to line %d in %v, %d lines were written before", l.chk.next.Load(), l.settle, rotDue)
				stalled = true
			}
			continue
		}
		rots++
		name := fmt.Sprintf("%s.%d", l.path, rots)
		if rots%2 == 1 {
			if err := os.Rename(l.path, name); err != nil {
				l.failf("tail: rename: %v", err)
				return
			}
			reopenAt = now.Add(tailRenameLag)
		} else {
			copied = make(chan error, 1)
			go func(ch chan<- error) { ch <- copyFile(l.path, name) }(copied)
		}
		rotated = append(rotated, name)
		if len(rotated) > tailKeep {
			os.Remove(rotated[0])
			rotated = rotated[1:]
		}
		dueSince, nextRot = time.Time{}, now.Add(l.rotate)
	}
}

// truncate ends a copytruncate: the writer, which is the caller, holds
// its writes while it waits for the engine to deliver every line
// written, truncates, and waits for the tail to see it.
func (l *tailLoad) truncate(f *os.File) {
	n := l.written.Load()
	if !waitFor(l.settle, func() bool { return l.delivered(n) }) {
		l.failf("tail: before a truncate, the engine delivered up to line %d of %d in %v", l.chk.next.Load(), n, l.settle)
		return
	}
	seen := l.tail.Truncations()
	if err := f.Truncate(0); err != nil {
		l.failf("tail: truncate: %v", err)
		return
	}
	if !waitFor(l.settle, func() bool { return l.tail.Truncations() > seen }) {
		l.failf("tail: the tail never saw the file truncated (%v)", l.settle)
		return
	}
	l.copyTruncs.Add(1)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// tailCheck checks the tail's lines: each one whole and as written, the
// first arrival of every line in order, and none twice (the soak never
// restarts the tail, which is the only time at-least-once delivery may
// repeat a line). Its chunk method runs on the tail's processing
// goroutine only; the counters are safe to read at any time.
type tailCheck struct {
	path     string
	next     atomic.Uint64 // one past the highest line delivered
	received atomic.Uint64
	dups     atomic.Uint64
	scratch  []byte
}

func newTailCheck(path string) *tailCheck { return &tailCheck{path: path} }

func (t *tailCheck) chunk(k *soakChecker, c engine.Chunk) {
	if len(c.Data) == 0 {
		return
	}
	if c.Flags&srcs.Truncated != 0 {
		k.failf("tail: a line was delivered cut short (a chunk flagged Truncated)")
	}
	for data := c.Data; len(data) > 0; {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			k.failf("tail: a chunk of whole lines ends in %q, no newline", clip(data, 40))
			return
		}
		t.line(k, data[:i+1])
		data = data[i+1:]
	}
}

func (t *tailCheck) line(k *soakChecker, b []byte) {
	var seq uint64
	sp := bytes.IndexByte(b, ' ')
	ok := sp > 0
	for _, d := range b[:max(sp, 0)] {
		if d < '0' || d > '9' {
			ok = false
			break
		}
		seq = seq*10 + uint64(d-'0')
	}
	if ok {
		t.scratch = tailLine(t.scratch[:0], seq)
		ok = bytes.Equal(b, t.scratch)
	}
	if !ok {
		k.failf("tail: a line that was never written: %q", clip(b, 60))
		return
	}
	next := t.next.Load()
	switch {
	case seq == next:
		t.next.Store(next + 1)
	case seq > next:
		k.failf("tail: lines %d to %d never arrived (line %d did)", next, seq-1, seq)
		t.next.Store(seq + 1)
	default:
		if t.dups.Add(1) == 1 {
			k.failf("tail: line %d arrived again after line %d (the tail re-read)", seq, next-1)
		}
	}
	t.received.Add(1)
}

// clip quotes at most n bytes of b.
func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
