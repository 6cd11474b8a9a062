package pool

import "time"

// Giving memory back. A pool's pages become resident as its buffers are
// first written, and a burst of traffic may touch all of them; without
// more, they would stay resident until Close, though the traffic that
// needed them is gone. So a buffer that stays free for a while has its
// pages given back to the kernel (returnPages), and the next grant of it
// faults them in afresh. The free list is a stack, so the buffers at its
// bottom are the ones free the longest, and a pool in steady use keeps
// reusing those at its top: only what the traffic no longer reaches goes
// back.
//
// Time is counted in ticks of ReturnAfter rather than read at every
// release: a release stamps the buffer with the current tick, and each
// tick gives back the resident free buffers stamped two ticks ago or
// earlier, so a buffer goes back between ReturnAfter and twice it after
// its release. The ticker runs only while a resident buffer is free.

// DefaultReturnAfter is Config.ReturnAfter's default.
const DefaultReturnAfter = time.Minute

// returnBytes bounds the pages one hold of the pool's lock gives back, so
// that acquires are not held up behind a long madvise.
const returnBytes = 1 << 20

// returner ticks while resident buffers are free. Guarded by p.mu.
type returner struct {
	tick    uint64      // the current tick, stamped on releases
	timer   *time.Timer // nil until first armed
	armed   bool
	stopped bool // the slab is unmapped: never arm again
}

// returns says whether the pool gives pages back at all.
func (p *Pool) returns() bool {
	return p.cfg.ReturnAfter > 0 && !p.cfg.Prefault && slabReturns
}

// freedLocked stamps b, which came home and stayed on the policy's free
// stack (policy.release, policy.cancel, when no waiter took it), with the
// current tick, and starts the ticker if b is resident and it is not
// running.
func (p *Pool) freedLocked(b *Buf) {
	b.freed = p.ret.tick
	if b.resident && !p.ret.armed && !p.ret.stopped && p.returns() {
		p.ret.armed = true
		if p.ret.timer == nil {
			p.ret.timer = time.AfterFunc(p.cfg.ReturnAfter, p.returnTick)
		} else {
			p.ret.timer.Reset(p.cfg.ReturnAfter)
		}
	}
}

// stopLocked stops the ticker for good: the slab is going.
func (r *returner) stopLocked() {
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.armed = false
}

// returnTick advances the tick and gives back the pages of the resident
// buffers free since two ticks ago, a few at a time under the lock. It
// runs again a tick later while any resident buffer is free.
func (p *Pool) returnTick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ret.stopped || p.closed {
		p.ret.armed = false
		return
	}
	p.ret.tick++
	per := max(1, returnBytes/p.cfg.BufSize)
	for {
		n, more := p.returnSomeLocked(per)
		if n == 0 || !more {
			break
		}
		// Let the acquires and releases waiting for the lock through.
		p.mu.Unlock()
		p.mu.Lock()
		if p.ret.stopped || p.closed {
			p.ret.armed = false
			return
		}
	}
	p.ret.armed = p.residentFreeLocked()
	if p.ret.armed {
		p.ret.timer.Reset(p.cfg.ReturnAfter)
	}
}

// returnSomeLocked gives back the pages of up to limit resident buffers
// free since two ticks ago, and says how many it gave back and whether
// more may be due.
func (p *Pool) returnSomeLocked(limit int) (n int, more bool) {
	for _, idx := range p.free {
		b := &p.bufs[idx]
		if b.freed+2 > p.ret.tick {
			return n, false // the rest came home later
		}
		if !b.resident {
			continue
		}
		if n == limit {
			return n, true
		}
		// A free buffer is nobody's: neither a consumer nor the kernel
		// reads or writes it until it is granted, under p.mu. If the
		// kernel refuses the advice, the pages stay, and are counted
		// as given back all the same: trying again would not help.
		_ = returnPages(b.data)
		b.resident = false
		p.resident--
		p.st.returned++
		n++
	}
	return n, false
}

// residentFreeLocked says whether any free buffer is resident.
func (p *Pool) residentFreeLocked() bool {
	for _, idx := range p.free {
		if p.bufs[idx].resident {
			return true
		}
	}
	return false
}
