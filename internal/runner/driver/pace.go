package driver

import (
	"runtime"

	"github.com/sluice-io/sluice/internal/contract"
)

// TurnBytes bounds what the reads of one loop turn of an event-loop worker
// may bring, and what a busy worker reads before it yields its P to
// processing: a small part of a core's cache, so that the kernel's copy
// into the buffers, and the consumer that reads them next, find them
// still cached, and so that the buffers processing releases are the ones
// the next turn's reads take again. A worker reading every readable
// socket in one turn (a thousand busy connections) wrote tens of MiB
// before processing read any of it, and held as many buffers.
// docs/decisions/0023-turns-in-the-cache.md has the runs that chose it.
const TurnBytes = 512 << 10

// DrainReads is how many reads in a row a worker gives a socket that still
// holds data after each, before it goes to the back of the line: a socket
// read until it drains, as a goroutine reading its connection does, keeps
// little queued in the kernel, which then takes the sender's data in
// fewer, larger segments. The bound keeps a socket whose sender refills
// it as fast as it is read from holding up the others.
const DrainReads = 64

// LightRead is what a socket's last read brought at most for its lane to
// be served first when it is readable again, before the sockets that are
// draining and the rest of the ready queue: a source that sends a little
// now and then (a line, a heartbeat, a sensor's reading) is read at its
// next turn instead of behind every busy socket's backlog, as a fair queue
// serves a new flow first. A busy socket's reads fill their buffers, so it
// is never served first twice in a row.
const LightRead = 4 << 10

// YieldChunks is how many chunks a busy worker emits before it yields its
// P to processing, however few bytes they hold.
const YieldChunks = 16

// Pace is an event-loop worker's budget of bytes for a turn and its
// account of what processing has not yet had a chance to take: the part
// of the turn written once for the uring and epoll workers.
//
// A worker calls Turn before it issues a turn's reads, Spend with what
// each read may bring (what the lane's last read brought is the best
// guess: a busy socket's read fills its buffer, a paced source's brings
// little), and stops issuing once Spent; Read and Emitted count what came
// in; between reaping and issuing, and before it waits, it calls Yield
// when YieldDue (or, before a wait, when anything was emitted). A Pace is
// owned by its worker's goroutine.
type Pace struct {
	inline  bool
	wakeups contract.WakeupHolder

	left      int // bytes this turn's reads may still bring
	unread    int // bytes read since the last yield
	unyielded int // chunks emitted since the last yield
}

// NewPace returns the Pace of a worker of a runner configured by cfg:
// with processing inline (cfg.Inline) it never yields, since nothing
// waits for the P; cfg.Wakeups, if set, has its held wake-ups released
// around every yield.
func NewPace(cfg contract.RunnerConfig) Pace {
	return Pace{inline: cfg.Inline, wakeups: cfg.Wakeups}
}

// Turn starts a turn's budget.
func (p *Pace) Turn() { p.left = TurnBytes }

// Spend charges a read that may bring up to n bytes to the turn.
func (p *Pace) Spend(n int) { p.left -= n }

// Spent reports whether the turn's reads may already bring TurnBytes.
func (p *Pace) Spent() bool { return p.left <= 0 }

// Read counts n bytes read.
func (p *Pace) Read(n int) { p.unread += n }

// Emitted counts k chunks handed downstream.
func (p *Pace) Emitted(k int) { p.unyielded += k }

// Pending reports whether chunks were emitted since the last yield.
func (p *Pace) Pending() bool { return p.unyielded > 0 }

// YieldDue reports whether the worker has read TurnBytes or emitted
// YieldChunks chunks since it last yielded.
func (p *Pace) YieldDue() bool { return p.unyielded >= YieldChunks || p.unread >= TurnBytes }

// Yield lets processing run: it gives up the worker's P (its locked thread
// would otherwise keep it until Go's sysmon noticed, 20 µs to 10 ms later,
// and with GOMAXPROCS=1 nothing else runs meanwhile), unless processing
// runs inside Emit. It must not be called while the worker holds
// wake-ups.
func (p *Pace) Yield() {
	p.unread, p.unyielded = 0, 0
	if !p.inline {
		runtime.Gosched()
	}
}

// Hold and Release bracket a phase of a turn that emits chunks
// (contract.WakeupHolder): processing is woken once a phase, not once a
// chunk.
func (p *Pace) Hold() {
	if p.wakeups != nil {
		p.wakeups.HoldWakeups()
	}
}

// Release ends a Hold.
func (p *Pace) Release() {
	if p.wakeups != nil {
		p.wakeups.ReleaseWakeups()
	}
}
