package pool

import (
	"time"
)

// A rate limit holds an account to a number of bytes a second by lending
// it no buffer while it owes bytes: a source that holds no buffer posts no
// read, the kernel's socket buffer fills, and TCP's window slows that
// sender alone (a datagram socket drops what its buffer cannot hold, and
// the kernel counts it). The bytes a source read are charged after the
// fact (Charge), so a source may read up to a buffer past its limit before
// it is held; over any stretch longer than a few buffers' worth its rate
// is the limit.

// limiter is an account's token bucket, in bytes. Guarded by p.mu.
type limiter struct {
	rate   float64       // bytes a second
	burst  float64       // the most tokens it saves up
	tokens float64       // negative while the account owes bytes
	at     time.Duration // when tokens was brought up to date, since p.epoch
	timer  *time.Timer   // while held: fires when the debt is paid

	holds     uint64
	heldTotal time.Duration
	heldSince time.Duration // when the hold in progress began
}

// refill brings the tokens up to date at now.
func (l *limiter) refill(now time.Duration) {
	if now > l.at {
		l.tokens = min(l.burst, l.tokens+l.rate*(now-l.at).Seconds())
		l.at = now
	}
}

// owed returns how long until the account has paid what it owes at now,
// or 0 when it owes nothing.
func (l *limiter) owed(now time.Duration) time.Duration {
	l.refill(now)
	if l.tokens >= 0 {
		return 0
	}
	return max(time.Duration(-l.tokens/l.rate*float64(time.Second)), time.Microsecond)
}

// SetRate holds the account to bytesPerSecond, with burst bytes that a
// source idle for a while may read at once; burst below one buffer is one
// buffer. Zero bytesPerSecond lifts the limit. Set it before the source
// starts reading.
func (a *Account) SetRate(bytesPerSecond, burst int64) {
	p := a.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if bytesPerSecond <= 0 {
		if a.w != nil {
			a.w.lim = nil
		}
		return
	}
	if a.w == nil {
		a.w = new(accountWait)
	}
	b := float64(max(burst, int64(p.cfg.BufSize)))
	a.w.lim = &limiter{rate: float64(bytesPerSecond), burst: b, tokens: b, at: time.Since(p.epoch)}
}

// limiter returns a's rate limit, or nil. Under p.mu.
func (a *Account) limiter() *limiter {
	if a.w == nil {
		return nil
	}
	return a.w.lim
}

// Charge records n bytes the account's source read, against its rate
// limit. Without one it does nothing; it takes the pool's lock, so a
// caller without a limit should not call it per chunk.
func (a *Account) Charge(n int) {
	p := a.p
	p.mu.Lock()
	if l := a.limiter(); l != nil {
		l.refill(time.Since(p.epoch))
		l.tokens -= float64(n)
	}
	p.mu.Unlock()
}

// holdLocked starts the timer of a waiting account the policy holds for
// its rate limit, which ends the hold when it has paid what it owes, d
// from now.
func (p *Pool) holdLocked(a *Account, d time.Duration, now time.Duration) {
	l := a.w.lim
	p.st.rateHolds++
	l.holds++
	l.heldSince = now
	if l.timer == nil {
		l.timer = time.AfterFunc(d, func() { p.unhold(a) })
	} else {
		l.timer.Reset(d)
	}
}

// unhold ends an account's hold when its debt is paid: it gets a buffer at
// once if one is free, and otherwise queues for one like any waiter.
func (p *Pool) unhold(a *Account) {
	p.mu.Lock()
	if a.state != waiting || a.in != inRate || p.closed {
		p.mu.Unlock()
		return
	}
	now := time.Since(p.epoch)
	if d := a.w.lim.owed(now); d > 0 {
		// Charged meanwhile: hold on.
		a.w.lim.timer.Reset(d)
		p.mu.Unlock()
		return
	}
	p.endHoldLocked(a, now)
	var notify func()
	switch idx, lent, queued := p.policy.unhold(a); {
	case lent:
		// A buffer was free: a takes it with no wait for one, as
		// TryAcquire would have, had it owed nothing.
		a.w.granted = p.lendLocked(a, idx)
		notify = a.w.notify
	case queued:
		// Its wait for a buffer starts now: the hold was no contention.
		a.startWaitLocked(now)
	}
	p.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// endHoldLocked records the end of a's hold at now and stops its timer;
// the policy then queues a (unhold) or forgets it (cancel).
func (p *Pool) endHoldLocked(a *Account, now time.Duration) {
	l := a.w.lim
	l.heldTotal += now - l.heldSince
	p.st.rateHeld += now - l.heldSince
	l.timer.Stop()
}
