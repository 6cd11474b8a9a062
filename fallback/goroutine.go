package fallback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/srcs"
)

// Goroutine is the portable runner: one goroutine per lane, reading with the
// source's own Read, so bytes arrive through Go's netpoller for sockets and
// through plain reads for anything else. It works on every OS and for
// sources that expose no descriptor.
//
// How well it keeps the shared runner contract depends on what the source
// offers:
//
//   - Sources that are srcs.Deadliner (srcs.Conn, net.Conn wrappers) get the
//     full contract. A partial buffer is emitted Flush after its first byte
//     even while the Read is still blocked: the runner sets the read
//     deadline to that moment, and a deadline error with data in hand means
//     "flush", not failure. Remove and Close interrupt a blocked Read by
//     setting the deadline to now; the source is never closed.
//   - Sources that are also syscall.Conn (and Deadliner) hold no buffer while
//     idle: the lane waits for readability with a one-byte MSG_PEEK on the
//     netpoller and only then acquires a buffer. Other sources must acquire
//     the buffer first and block in Read while holding it.
//   - Sources without a deadline cannot be interrupted. Their reads are
//     emitted as soon as they return (as if Flush were zero), since nothing
//     could wake the lane at the flush deadline, and Remove and Close take
//     effect only when the current Read returns: Close waits for it.
//
// Sources that are contract.DatagramReader (srcs.UDPSource) are read one
// datagram per ReadDatagram, into buffers framed as srcs.ForEachDatagram
// reads them; a datagram too large for the room left is dropped, reported
// to the emitter if it is a contract.DatagramDropReporter, and logged once per
// lane, and the lane keeps running. Other sources are byte streams to this
// runner, whatever their descriptor's Kind, since it never asks for one.
//
// A Goroutine is safe for concurrent use. It borrows each lane from Add until
// it calls Finish and never closes a source.
type Goroutine struct {
	log contract.Logger

	laneSet[*goLane]               // mu, closed, lanes, wg
	resume           chan struct{} // closed when a pause ends; nil while running
	retired          uint64        // reads of lanes that have finished
	waited           uint64        // readability waits of lanes that have finished

	paused atomic.Bool  // mirrors resume != nil, for the read path
	eager  atomic.Int32 // lanes reading without a readability wait (takeEager)
}

// NewGoroutine returns a goroutine-per-lane runner. It uses only cfg.Logger;
// the lanes carry their pool accounts.
func NewGoroutine(cfg contract.RunnerConfig) (*Goroutine, error) {
	log := cfg.Logger
	if log == nil {
		log = contract.Discard{}
	}
	return &Goroutine{log: log, laneSet: laneSet[*goLane]{lanes: map[*contract.Lane]*goLane{}}}, nil
}

// Name returns "goroutine".
func (g *Goroutine) Name() string { return "goroutine" }

// goLane is the state of one lane. All but stop, the counters and the
// fields under mu are owned by the lane's goroutine; mu orders deadline
// changes between it and Remove.
type goLane struct {
	f      driver.Lane
	ctx    context.Context // ends on Remove or Close, to abandon pool and pause waits
	cancel context.CancelFunc

	dgram  contract.DatagramReader // nil unless the source reads datagrams
	dl     srcs.Deadliner          // nil if the source has no deadline
	rc     syscall.RawConn         // nil unless the source exposes one and a deadline
	peek   func(fd uintptr) bool
	one    [1]byte   // MSG_PEEK target
	peeked error     // a socket error the peek consumed
	dlCur  time.Time // the read deadline last set
	dlSet  bool      // whether dlCur is known to be in force
	// more says the lane's last read filled the room it was given, so
	// the source likely has more: the next buffer may be taken without a
	// readability wait first (a wait and a read where one read does;
	// takeEager), and goes back if nothing comes within the lane's flush
	// timeout of heldAt.
	more   bool
	eager  bool // holds a place among the lanes reading eagerly (takeEager)
	heldAt time.Time
	timer  *time.Timer // flush timer while paused, made on first need
	reads  atomic.Uint64
	waits  atomic.Uint64
	stop   atomic.Bool
	mu     sync.Mutex
	done   bool // the lane has stopped touching its source; guarded by mu
}

// Add starts a goroutine that drives l. It fails after Close, for a lane
// that is already being driven, and for a malformed lane.
func (g *Goroutine) Add(l *contract.Lane) error {
	if err := driver.Check("fallback: goroutine", l); err != nil {
		return err
	}
	gl := &goLane{}
	flush := l.Flush
	if dl, ok := l.Src.(srcs.Deadliner); ok {
		gl.dl = dl
		if sc, ok := l.Src.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				gl.rc = rc
				gl.peek = gl.peekReadable
			}
		}
	} else {
		flush = 0
	}
	if dr, ok := l.Src.(contract.DatagramReader); ok {
		if err := contract.CheckFraming(l, contract.Datagram); err != nil {
			return fmt.Errorf("fallback: goroutine: add %w", err)
		}
		gl.dgram = dr
		gl.f.ResetDatagram(l, flush)
	} else {
		gl.f.Reset(l, flush)
	}
	gl.ctx, gl.cancel = context.WithCancel(context.Background())

	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		gl.cancel()
		return fmt.Errorf("fallback: goroutine: add lane %d: %w", l.ID, net.ErrClosed)
	case g.lanes[l] != nil:
		gl.cancel()
		return fmt.Errorf("fallback: goroutine: add lane %d: already added", l.ID)
	}
	g.lanes[l] = gl
	g.wg.Go(func() { g.run(gl) })
	return nil
}

// Remove stops driving l; see the type's documentation for sources that
// cannot be interrupted. It does not wait, and is a no-op for a lane that
// has finished or was never added.
func (g *Goroutine) Remove(l *contract.Lane) { g.remove(l) }

// halt asks the lane's goroutine to stop and interrupts whatever it waits on.
func (gl *goLane) halt() {
	gl.stop.Store(true)
	gl.cancel()
	gl.mu.Lock()
	defer gl.mu.Unlock()
	if !gl.done && gl.dl != nil {
		// An error means the source is already closing, which ends the
		// Read anyway.
		_ = gl.dl.SetReadDeadline(time.Now())
	}
}

// SetPaused stops or resumes new reads on every lane. A paused lane emits
// its partial data when the flush timeout passes and gives back an empty
// buffer, so paused lanes pin only the buffers that hold data.
func (g *Goroutine) SetPaused(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case paused && g.resume == nil:
		g.resume = make(chan struct{})
		g.paused.Store(true)
	case !paused && g.resume != nil:
		close(g.resume)
		g.resume = nil
		g.paused.Store(false)
	}
}

// Close stops every lane, each finishing with srcs.ErrStopped, and waits for
// their goroutines to exit (for sources without a deadline, until their
// current Read returns). It is idempotent.
func (g *Goroutine) Close() error { return g.closeAll() }

// Stats returns the runner's counters. Workers counts lane goroutines; the
// runner locks no OS threads. Waits counts readability waits on the
// netpoller.
func (g *Goroutine) Stats() contract.RunnerStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := contract.RunnerStats{Runner: g.Name(), Workers: len(g.lanes), Lanes: len(g.lanes), Reads: g.retired, Waits: g.waited}
	for _, gl := range g.lanes {
		st.Reads += gl.reads.Load()
		st.Waits += gl.waits.Load()
	}
	// Every Read and every readability probe is a system call; the
	// netpoller's epoll_wait is Go's, and not counted.
	st.Syscalls = st.Reads + st.Waits
	return st
}

// run drives one lane to its end and reports it.
func (g *Goroutine) run(gl *goLane) {
	err := g.drive(gl)
	gl.mu.Lock()
	gl.done = true
	gl.mu.Unlock()
	gl.cancel()
	if gl.timer != nil {
		gl.timer.Stop()
	}
	g.mu.Lock()
	delete(g.lanes, gl.f.Lane())
	g.retired += gl.reads.Load()
	g.waited += gl.waits.Load()
	g.mu.Unlock()
	gl.f.Finish(err)
}

// maxEager bounds the lanes of a goroutine runner that hold an empty buffer
// in a read they made without a readability wait (goLane.more): a thousand
// busy connections that each held one emptied the pool.
const maxEager = 64

// takeEager reports whether gl may take its next buffer without waiting for
// readability first: its last read filled its buffer, a flush timeout will
// hand the buffer back if nothing comes, and fewer than maxEager lanes do
// so now. endEager ends it once the read returns.
func (g *Goroutine) takeEager(gl *goLane) bool {
	if !gl.more || gl.f.Lane().Flush <= 0 || gl.dl == nil {
		return false
	}
	if g.eager.Add(1) > maxEager {
		g.eager.Add(-1)
		return false
	}
	gl.eager = true
	return true
}

// endEager gives back gl's place among the lanes reading eagerly, if it
// holds one.
func (g *Goroutine) endEager(gl *goLane) {
	if gl.eager {
		gl.eager = false
		g.eager.Add(-1)
	}
}

// drive reads the lane until it ends and returns the error to finish with.
func (g *Goroutine) drive(gl *goLane) error {
	defer g.endEager(gl)
	f, l := &gl.f, gl.f.Lane()
	for {
		if gl.stop.Load() {
			return srcs.ErrStopped
		}
		if g.paused.Load() {
			if !g.pauseWait(gl) {
				return srcs.ErrStopped
			}
			continue
		}
		if f.NeedsBuffer() {
			if !f.Held() && gl.rc != nil && !g.takeEager(gl) {
				if err := gl.awaitReadable(); err != nil {
					return gl.readErr(err)
				}
			}
			b, err := l.Account.Acquire(gl.ctx)
			if err != nil {
				if gl.stop.Load() {
					return srcs.ErrStopped
				}
				return fmt.Errorf("fallback: goroutine: lane %d: acquire: %w", l.ID, err)
			}
			gl.heldAt = time.Now()
			f.Hold(b, gl.heldAt)
			// Re-check stop and pause: the wait may have been long.
			continue
		}
		if err := gl.setDeadline(); err != nil {
			return gl.readErr(err)
		}
		var n int
		var err error
		truncated := false
		space := f.Space()
		if gl.dgram != nil {
			n, truncated, err = gl.dgram.ReadDatagram(space)
		} else {
			n, err = l.Src.Read(space)
			gl.more = n == len(space)
		}
		g.endEager(gl)
		gl.reads.Add(1)
		now := time.Now()
		switch {
		case gl.dgram == nil:
			if n > 0 {
				if _, cerr := f.Commit(n, now); cerr != nil {
					return cerr
				}
			}
		case err != nil:
			// No datagram came with the error.
		case truncated:
			// The netpoller path does not learn the real length.
			f.Drop(n+1, g.log, "fallback: goroutine")
		default:
			_, _ = f.Commit(n, now) // n may be 0: an empty datagram
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !gl.stop.Load() {
				// Our flush deadline fired. Flush whatever is held (an
				// empty buffer goes back to the pool, and the lane waits
				// for readability before it takes another); with nothing
				// held the deadline was stale, so set it again.
				gl.dlSet, gl.more = false, false
				f.Flush(now)
				continue
			}
			return gl.readErr(err)
		}
		f.FlushIfDue(now)
	}
}

// readErr maps an error from the lane's source to what Finish reports.
func (gl *goLane) readErr(err error) error {
	switch {
	case gl.stop.Load():
		return srcs.ErrStopped
	case errors.Is(err, io.EOF):
		return io.EOF
	}
	return driver.Classify(err)
}

// setDeadline makes the source's read deadline the flush deadline of the
// held data, or none. It only calls the source when the deadline changes,
// so a lane filling one buffer sets it once.
func (gl *goLane) setDeadline() error {
	if gl.dl == nil {
		return nil
	}
	want, ok := gl.f.Due()
	if l := gl.f.Lane(); !ok && gl.more && gl.f.Held() && gl.f.Pending() == 0 && l.Flush > 0 {
		// An empty buffer taken without a readability wait goes back if
		// nothing comes within the flush timeout.
		want = gl.heldAt.Add(l.Flush)
	}
	if gl.dlSet && want.Equal(gl.dlCur) {
		return nil
	}
	gl.mu.Lock()
	defer gl.mu.Unlock()
	// Under mu, so that a concurrent halt's deadline of now is never
	// overwritten by ours.
	if gl.stop.Load() {
		return srcs.ErrStopped
	}
	if err := gl.dl.SetReadDeadline(want); err != nil {
		gl.dlSet = false
		return err
	}
	gl.dlCur, gl.dlSet = want, true
	return nil
}

// awaitReadable parks the lane on the netpoller until its socket has data,
// an end of stream or an error, without holding a buffer.
func (gl *goLane) awaitReadable() error {
	if err := gl.setDeadline(); err != nil {
		return err
	}
	gl.waits.Add(1)
	if err := gl.rc.Read(gl.peek); err != nil {
		return err
	}
	// A pending socket error is reported once, and the peek took it: the
	// Read would see a clean end of stream instead.
	err := gl.peeked
	gl.peeked = nil
	return err
}

// peekReadable is the RawConn.Read callback: it reports readiness without
// consuming data, and returns false on EAGAIN so the netpoller waits.
func (gl *goLane) peekReadable(fd uintptr) bool {
	for {
		_, _, err := unix.Recvfrom(int(fd), gl.one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch err {
		case nil, unix.ENOTSOCK:
			// Data, end of stream, or not a socket: go and read.
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			gl.peeked = os.NewSyscallError("recvfrom", err)
		}
		return true
	}
}

// pauseWait blocks a lane while the runner is paused. It flushes held data
// when its timeout passes, and returns false if the lane is stopped.
func (g *Goroutine) pauseWait(gl *goLane) bool {
	f := &gl.f
	f.Idle() // an idle lane pins no buffer
	g.mu.Lock()
	resume := g.resume
	g.mu.Unlock()
	if resume == nil {
		return true
	}
	var timeout <-chan time.Time
	if due, ok := f.Due(); ok {
		d := time.Until(due)
		if d <= 0 {
			f.Flush(time.Now())
			return true
		}
		if gl.timer == nil {
			gl.timer = time.NewTimer(d)
		} else {
			gl.timer.Reset(d)
		}
		timeout = gl.timer.C
	}
	defer func() {
		if timeout != nil {
			gl.timer.Stop()
		}
	}()
	select {
	case <-resume:
	case <-gl.ctx.Done():
		return false
	case <-timeout:
		f.Flush(time.Now())
	}
	return true
}
