package pool

import (
	"context"
	"sync/atomic"
	"time"
)

// Account charges buffers to one source and carries its place in the wait
// queues. Methods are safe for concurrent use, but an account is meant to
// be driven by one runner at a time: at most one wait may be pending.
type Account struct {
	p  *Pool
	id SourceID

	// Guarded by p.mu; the policy (policy.go) alone changes held, state,
	// in, prev and next. An engine keeps an account per connection, most
	// of them idle and never waiting, so each field is no wider than its
	// values (held is bounded by MaxBuffers, the wait list an account is
	// in is named rather than pointed to) and what only a wait uses is in
	// w, made on the account's first wait.
	held       int32 // buffers charged to it, a reserved one included
	state      waitState
	left       bool
	in         listID   // where a waiting account waits; inNone when parked
	prev, next *Account // its neighbours in its wait list
	acquired   uint64
	w          *accountWait

	// blk is what a blocking Acquire waits on, made on first use: the
	// event-loop runners never block, and their idle sources are many.
	blk atomic.Pointer[blocker]
}

// accountWait is the part of an Account that waits use, and a rate limit
// (which only an account that waits for its limit needs). Guarded by p.mu.
type accountWait struct {
	lim       *limiter      // SetRate's; nil without a rate limit
	since     time.Duration // when the pending wait began, since p.epoch
	notify    func()
	granted   *Buf
	waits     uint64
	waitTotal time.Duration
}

// blocker is an Account's means of blocking: ch is signalled, without
// blocking the signaller, when a blocking Acquire is granted.
type blocker struct {
	ch     chan struct{}
	signal func()
}

func (a *Account) blocker() *blocker {
	if b := a.blk.Load(); b != nil {
		return b
	}
	b := &blocker{ch: make(chan struct{}, 1)}
	b.signal = func() {
		select {
		case b.ch <- struct{}{}:
		default:
		}
	}
	if a.blk.CompareAndSwap(nil, b) {
		return b
	}
	return a.blk.Load()
}

// ID returns the source the account belongs to.
func (a *Account) ID() SourceID { return a.id }

// TryAcquire returns a buffer if the policy allows one now, and never
// blocks. If a buffer was already reserved for a pending Wait, it returns
// that one.
func (a *Account) TryAcquire() (*Buf, bool) {
	p := a.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return a.tryLocked()
}

// tryLocked returns the buffer reserved for a, or lends it a free one if
// the pool is open, a has not left and the policy allows.
func (a *Account) tryLocked() (*Buf, bool) {
	p := a.p
	switch {
	case a.state == granted:
		return a.claimLocked(), true
	case p.closed || p.closing || a.left:
		return nil, false
	}
	idx, ok := p.policy.try(a, a.owesLocked())
	if !ok {
		return nil, false
	}
	return p.lendLocked(a, idx), true
}

// Wait is the asynchronous acquire for event-loop runners. It returns a
// buffer at once if the policy allows; otherwise it queues the account
// and returns false. When a buffer has been reserved, notify is called
// once, on the releasing goroutine and without locks held; it should only
// wake the runner, which then calls Claim. A notify may be spurious (the
// wait may have been cancelled meanwhile), so Claim's result decides.
func (a *Account) Wait(notify func()) (*Buf, bool, error) {
	p := a.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.closing {
		return nil, false, ErrClosed
	}
	if a.left {
		return nil, false, ErrLeft
	}
	if b, ok := a.tryLocked(); ok {
		return b, true, nil
	}
	if a.state == idle {
		a.queueLocked(notify)
	}
	return nil, false, nil
}

// queueLocked makes a, which may have no buffer now, a waiter that notify
// is to tell of its grant: held by its rate limit while it owes, and
// otherwise queued for a buffer, which alone counts as a wait.
func (a *Account) queueLocked(notify func()) {
	p := a.p
	if a.w == nil {
		a.w = new(accountWait)
	}
	now := time.Since(p.epoch)
	a.w.notify = notify
	owed := a.owedLocked(now)
	if p.policy.wait(a, owed > 0) {
		a.startWaitLocked(now)
	} else if owed > 0 {
		// Held by its rate limit: a hold, not a wait for a buffer.
		p.holdLocked(a, owed, now)
	}
}

// startWaitLocked counts a wait for a buffer, which the policy says began
// at now: Stats.Waits counts it, and its grant times it.
func (a *Account) startWaitLocked(now time.Duration) {
	a.w.since = now
	a.w.waits++
	a.p.st.waits++
}

// owesLocked reports whether a owes its rate limit bytes now. It reads
// the clock only for an account with a limit.
func (a *Account) owesLocked() bool {
	l := a.limiter()
	return l != nil && l.owed(time.Since(a.p.epoch)) > 0
}

// owedLocked returns how long a must wait for its rate limit at now: 0
// without one, or when it owes nothing.
func (a *Account) owedLocked(now time.Duration) time.Duration {
	if l := a.limiter(); l != nil {
		return l.owed(now)
	}
	return 0
}

// Claim collects a buffer reserved for a pending Wait.
func (a *Account) Claim() (*Buf, bool) {
	p := a.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.state != granted {
		return nil, false
	}
	return a.claimLocked(), true
}

func (a *Account) claimLocked() *Buf {
	a.p.policy.claim(a)
	b := a.w.granted
	a.w.granted, a.w.notify = nil, nil
	return b
}

// Cancel withdraws a pending Wait. A buffer already reserved for it goes
// to the next waiter.
func (a *Account) Cancel() {
	p := a.p
	p.mu.Lock()
	notify := a.cancelLocked()
	p.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// cancelLocked withdraws a's wait, or takes home the buffer reserved for
// it, and returns the notify of the waiter the policy hands that buffer
// on to, if any.
func (a *Account) cancelLocked() func() {
	p := a.p
	var home *Buf // the buffer reserved for a, which goes home
	switch a.state {
	case idle:
		return nil
	case waiting:
		if a.in == inRate {
			p.endHoldLocked(a, time.Since(p.epoch))
		}
	case granted:
		home = a.w.granted
		home.owner = nil
		home.held.Store(false)
		a.acquired--
		p.st.acquired--
	}
	a.w.granted, a.w.notify = nil, nil
	var reserved int32
	if home != nil {
		reserved = home.idx
	}
	notify := p.grantLocked(p.policy.cancel(a, reserved))
	if home != nil && home.owner == nil { // not handed on at once
		p.freedLocked(home)
	}
	p.homeLocked()
	return notify
}

// Acquire blocks until the policy grants a buffer or ctx ends. On
// cancellation it returns ctx.Err() and leaves no waiter behind; a buffer
// reserved in the meantime goes to the next waiter. It serves the
// goroutine and thread runners.
func (a *Account) Acquire(ctx context.Context) (*Buf, error) {
	blk := a.blocker()
	for {
		b, ok, err := a.Wait(blk.signal)
		if err != nil || ok {
			return b, err
		}
		select {
		case <-blk.ch:
			if b, ok := a.Claim(); ok {
				return b, nil
			}
			// A stale signal from an earlier, cancelled wait: wait again.
		case <-ctx.Done():
			a.Cancel()
			select {
			case <-blk.ch:
			default:
			}
			return nil, ctx.Err()
		}
	}
}

// Leave closes the account: a pending wait is cancelled and any buffer
// reserved for it goes to the next waiter. Buffers the source still holds
// stay charged to it until released. Leave is idempotent.
func (a *Account) Leave() {
	p := a.p
	p.mu.Lock()
	if a.left {
		p.mu.Unlock()
		return
	}
	a.left = true
	p.accounts--
	notify := a.cancelLocked()
	p.mu.Unlock()
	if notify != nil {
		notify()
	}
}
