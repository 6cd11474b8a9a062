package jetstream

// The ordering core. publisher.go says what it promises and why; this is
// the bookkeeping that keeps the promise, apart from NATS.

import (
	"fmt"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// order decides, for the chunks a Publisher holds, which to publish and
// how (plainly, or pipelined behind the previous chunk of their source),
// which an acknowledgement releases, which an error, a timeout or a
// reconnect sends again, and when the publisher must wake up for a
// deadline. Each held chunk has a slot, its index in the publisher's
// arrays; a source's slots form a queue, oldest first.
//
// order does no I/O, reads no clock and starts no goroutine: the
// Publisher tells it what happened (add, ack, nack, tick, and each
// publish's own result through published), with the time, and carries
// out what it decides: the publishes next returns, one at a time, the
// slots ack releases, the failures takeReports returns and the deadline
// in wake. It is not safe for concurrent use; the Publisher calls it
// with its mutex held.
type order struct {
	ackTimeout time.Duration
	retryWait  time.Duration
	noPipeline bool
	// solo: connected to a server outside any cluster, where pipelining
	// is safe. Set by the Publisher at every (re)connect.
	solo bool

	slots   []entry
	free    []int32
	sources map[srcs.ID]*queue // sources with chunks held
	held    int                // chunks added and not yet settled

	// lastSrc is the source of the last publish sent: while it has a
	// chunk in flight, its next chunk may be pipelined behind it.
	lastSrc   srcs.ID
	lastValid bool
	pauseTill time.Time // no pipelining before then
	wake      time.Time // the earliest deadline the publisher must wake for; zero: none
	kick      bool      // wake moved earlier since takeKick

	// What next sends, in this order: a source's head (plain), then the
	// chunks pipe may pipeline, or a scan of every slot for deadlines
	// (from slot scan on; -1: none).
	plain   int32
	pipe    srcs.ID
	piping  bool
	scan    int
	scanAll bool

	released []int32  // ack's result, reused
	reports  []report // first failures, until takeReports

	closing, idled, aborted, closed bool

	retries, pipelined, rejected, duplicates uint64
}

// An entry is a slot's ordering state.
type entry struct {
	src      srcs.ID
	state    slotState
	gen      uint32    // bumped at every reuse; part of the reply subject
	next     int32     // the next held chunk of the same source, or -1
	deadline time.Time // sent: when the ack is overdue; retry: when to send again
	failed   bool      // a failure of this chunk was reported: its retries are only counted
}

type slotState uint8

const (
	slotFree    slotState = iota
	slotQueued            // behind an earlier chunk of its source, never sent
	slotSent              // awaiting its acknowledgement
	slotRetry             // the source's head: failed; waiting RetryWait to go again
	slotWaiting           // pipelined and failed: goes again when it is the head
	slotDone              // acknowledged while an earlier chunk of its source is not
)

// queue is a source's held chunks, oldest first: slot indices linked by
// entry.next. The head and the chunks up to last have been sent; those
// after last have not.
type queue struct{ head, tail, last int32 }

// send is a publish order decided: slot's chunk, plainly (expect -1) or
// pipelined behind the chunk of slot expect, whose message id the
// publish names in Nats-Expected-Last-Msg-Id.
type send struct{ slot, expect int32 }

// report is a chunk's first failure, for the error handler: through a
// leader election every source's head fails at every RetryWait, and a log
// should hear of each chunk once. Stats.Retries counts them all.
type report struct {
	slot  int32
	cause error
}

// ackTimeoutError is the failure of a chunk whose acknowledgement is
// overdue.
type ackTimeoutError time.Duration

func (e ackTimeoutError) Error() string {
	return fmt.Sprintf("no acknowledgement within %v", time.Duration(e))
}

// newOrder returns an order for n slots, the publisher's MaxPending.
func newOrder(n int, ackTimeout, retryWait time.Duration, noPipeline bool) *order {
	o := &order{ackTimeout: ackTimeout, retryWait: retryWait, noPipeline: noPipeline,
		slots: make([]entry, n), free: make([]int32, n), sources: map[srcs.ID]*queue{},
		plain: -1, scan: -1}
	for i := range o.free {
		o.free[i] = int32(n - 1 - i)
	}
	return o
}

// add takes a new chunk of src and returns its slot, or -1 once Close has
// ended or given up. The caller holds fewer than n chunks (the
// publisher's window). The chunk goes at once when it heads its source,
// or pipelined when it may.
func (o *order) add(src srcs.ID) int32 {
	if o.closed || o.aborted {
		return -1
	}
	i := o.free[len(o.free)-1]
	o.free = o.free[:len(o.free)-1]
	e := &o.slots[i]
	e.src, e.next, e.failed, e.state = src, -1, false, slotQueued
	o.held++
	if q := o.sources[src]; q != nil {
		o.slots[q.tail].next = i
		q.tail = i
		o.pipe, o.piping = src, true
	} else {
		o.sources[src] = &queue{i, i, i}
		o.plain = i
	}
	return i
}

// gen returns slot i's generation, which its reply subject carries.
func (o *order) gen(i int32) uint32 { return o.slots[i].gen }

// next returns the next publish to make at now, or false when there is
// none. The caller makes it and tells published the result before it
// calls next again: a publish that fails stops the pipelining behind it.
func (o *order) next(now time.Time) (send, bool) {
	if i := o.plain; i >= 0 {
		o.plain = -1
		return o.send(i, -1, now), true
	}
	if o.piping {
		if snd, ok := o.pipeline(now); ok {
			return snd, true
		}
		o.piping = false
	}
	if o.scan >= 0 {
		return o.scanNext(now)
	}
	return send{}, false
}

// pipeline returns the chunk after the last sent one of the source pipe,
// to go behind it, while the last publish sent is that one and in flight.
func (o *order) pipeline(now time.Time) (send, bool) {
	q := o.sources[o.pipe]
	if q == nil || q.last < 0 || o.noPipeline || !o.solo || now.Before(o.pauseTill) {
		return send{}, false
	}
	prev := &o.slots[q.last]
	i := prev.next
	if i < 0 || prev.state != slotSent || !o.lastValid || o.lastSrc != prev.src {
		return send{}, false
	}
	o.pipelined++
	expect := q.last
	q.last = i
	return o.send(i, expect, now), true
}

// send marks slot i sent at now.
func (o *order) send(i, expect int32, now time.Time) send {
	e := &o.slots[i]
	e.state, e.deadline = slotSent, now.Add(o.ackTimeout)
	o.lastSrc, o.lastValid = e.src, true
	return send{i, expect}
}

// published takes the result of the publish snd: err is the client's,
// from handing it over. A plain one that failed goes again after
// RetryWait; a pipelined one when it heads its source.
func (o *order) published(snd send, err error, now time.Time) {
	e := &o.slots[snd.slot]
	if err != nil {
		o.lastValid = false
		if snd.expect >= 0 {
			e.state = slotWaiting
			return
		}
		e.state, e.deadline = slotRetry, now.Add(o.retryWait)
		o.fail(snd.slot, err)
	}
	o.arm(e.deadline)
}

// fail reports slot i's failure if it is the chunk's first.
func (o *order) fail(i int32, cause error) {
	if e := &o.slots[i]; !e.failed {
		e.failed = true
		o.reports = append(o.reports, report{i, cause})
	}
}

// arm makes sure the publisher wakes up by t.
func (o *order) arm(t time.Time) {
	if o.wake.IsZero() || t.Before(o.wake) {
		o.wake, o.kick = t, true
	}
}

// replied returns the entry of slot i and its source's queue if a reply
// with generation gen is for a chunk awaiting one, or nil: a late reply
// for a chunk already acknowledged (its slot free or reused), or any
// reply once Close gave up.
func (o *order) replied(i int, gen uint32) (*entry, *queue) {
	if i < 0 || i >= len(o.slots) || o.aborted {
		return nil, nil
	}
	e := &o.slots[i]
	if e.gen != gen || (e.state != slotSent && e.state != slotRetry && e.state != slotWaiting) {
		return nil, nil
	}
	return e, o.sources[e.src]
}

// ack takes the acknowledgement of slot i's publish and returns the slots
// it releases, oldest first (valid until the next call): the head of its
// source and the chunks acknowledged behind it. A chunk acknowledged
// behind an unacknowledged one is stored after it, and waits to be
// released with it. The source's next chunk then goes, unless it is in
// flight already, with whatever may be pipelined behind it.
func (o *order) ack(i int, gen uint32, duplicate bool) []int32 {
	e, q := o.replied(i, gen)
	if e == nil {
		return nil
	}
	if duplicate {
		o.duplicates++
	}
	if q.head != int32(i) {
		e.state = slotDone
		return nil
	}
	src := e.src
	j := o.release(q, int32(i))
	if j < 0 {
		delete(o.sources, src)
		return o.released
	}
	q.head = j
	if h := &o.slots[j]; h.state == slotQueued || h.state == slotWaiting {
		if h.state == slotWaiting {
			o.retries++
		}
		if q.last < 0 {
			q.last = j
		}
		o.plain = j
	}
	o.pipe, o.piping = src, true
	return o.released
}

// release frees slot i, the head of q, and the acknowledged slots after
// it into o.released, and returns the first slot left, or -1.
func (o *order) release(q *queue, i int32) int32 {
	o.released = o.released[:0]
	for {
		e := &o.slots[i]
		o.released = append(o.released, i)
		if q.last == i {
			q.last = -1
		}
		next := e.next
		e.state = slotFree
		e.gen++
		o.free = append(o.free, i)
		i = next
		if i < 0 || o.slots[i].state != slotDone {
			return i
		}
	}
}

// nack takes an error reply to slot i's publish. A source's head goes
// again after RetryWait; a pipelined chunk goes again plainly once it
// heads its source. rejected says JetStream refused a pipelined publish
// because the stream's last message was not the one it named: something
// else publishes into the stream, so pipelining pauses.
func (o *order) nack(i int, gen uint32, cause error, rejected bool, now time.Time) {
	e, q := o.replied(i, gen)
	if e == nil {
		return
	}
	if q.head != int32(i) {
		if e.state == slotSent {
			e.state = slotWaiting
		}
		if rejected {
			o.rejected++
			o.pauseTill = now.Add(pipelinePause)
		}
		return
	}
	o.fail(int32(i), cause)
	if e.state == slotSent {
		e.state, e.deadline = slotRetry, now.Add(o.retryWait)
		o.arm(e.deadline)
	}
}

// tick starts a scan for deadlines, which next carries out: a head whose
// acknowledgement is overdue, or whose retry is due, goes again; an
// overdue pipelined chunk waits to head its source. With all (after a
// reconnect, which took every publish in flight with the old connection),
// every chunk awaiting an acknowledgement counts as overdue. Once the
// scan is done, wake holds the next deadline.
func (o *order) tick(all bool) {
	if o.aborted || o.closed {
		o.wake = time.Time{}
		return
	}
	o.scan, o.scanAll = 0, all
}

// scanNext carries the scan on from slot o.scan up to its next publish.
func (o *order) scanNext(now time.Time) (send, bool) {
	for ; o.scan < len(o.slots); o.scan++ {
		i := int32(o.scan)
		e := &o.slots[i]
		overdue := e.state == slotSent && (o.scanAll || !e.deadline.After(now))
		if overdue && o.sources[e.src].head != i {
			e.state = slotWaiting // pipelined: goes again when it is the head
			continue
		}
		if overdue {
			if !o.scanAll {
				o.fail(i, ackTimeoutError(o.ackTimeout))
			}
			e.state, e.deadline = slotRetry, now
		}
		if e.state == slotRetry && !e.deadline.After(now) {
			// Of a source, only its head is ever sent or waiting to be
			// sent again: the rest are queued behind it.
			o.retries++
			o.wake = now // the publisher is awake: no kick
			o.scan++
			return o.send(i, -1, now), true
		}
	}
	o.scan = -1
	o.wake = o.earliest()
	return send{}, false
}

// earliest returns the earliest deadline of a chunk awaiting its
// acknowledgement or its retry, or zero.
func (o *order) earliest() time.Time {
	var t time.Time
	for i := range o.slots {
		e := &o.slots[i]
		if (e.state == slotSent || e.state == slotRetry) && (t.IsZero() || e.deadline.Before(t)) {
			t = e.deadline
		}
	}
	return t
}

// takeKick reports whether wake moved earlier since the last call: the
// publisher's timer must be set again.
func (o *order) takeKick() bool {
	k := o.kick
	o.kick = false
	return k
}

// takeReports returns the failures to report since the last call (valid
// until the next).
func (o *order) takeReports() []report {
	r := o.reports
	o.reports = o.reports[:0]
	return r
}

// settle counts n released chunks as no longer held, once their owner has
// them back, and reports whether the publisher has just become idle while
// closing (true once).
func (o *order) settle(n int) bool {
	o.held -= n
	return o.becameIdle()
}

// beginClose marks the publisher closing and reports whether it is idle
// already (true once, as for settle).
func (o *order) beginClose() bool {
	o.closing = true
	return o.becameIdle()
}

func (o *order) becameIdle() bool {
	if o.closing && o.held == 0 && !o.idled {
		o.idled = true
		return true
	}
	return false
}

// abort gives up on what is held, which stays unreleased: replies are
// ignored from now on and add refuses. It returns how many chunks are
// held.
func (o *order) abort() int {
	o.aborted = true
	return o.held
}

// shut ends the publisher's life: add refuses and tick does nothing.
func (o *order) shut() { o.closed = true }
