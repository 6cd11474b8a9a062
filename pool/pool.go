package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// ErrClosed is returned by operations on a closed pool.
	ErrClosed = errors.New("pool: closed")
	// ErrLeft is returned by operations on an account that has left.
	ErrLeft = errors.New("pool: account has left")
	// ErrOutstanding is returned by Close while buffers are still held.
	ErrOutstanding = errors.New("pool: buffers outstanding")
)

// Pool is a fixed set of equal buffers cut from one slab. It is safe for
// concurrent use. The pool owns the slab; a Buf is lent to one account at a
// time until it is released.
type Pool struct {
	cfg  Config
	slab []byte
	bufs []Buf

	epoch time.Time // what Account.since counts from

	mu sync.Mutex
	// policy decides who gets each buffer (policy.go); the pool carries
	// out its grants.
	policy
	closed   bool
	closing  bool // CloseWhenIdle was called: the last buffer home unmaps
	accounts int
	idle     chan struct{} // closed when no buffer is held; nil until WaitIdle asks
	ret      returner      // gives idle buffers' pages back (return.go)
	resident int           // buffers whose pages may be resident
	st       counters
	// onGrant, if set, is called under mu after every grant. Tests use it
	// to check the policy at the moment it acts.
	onGrant func(a *Account)
}

type counters struct {
	acquired, released, waits uint64
	stale                     uint64
	waitTotal                 time.Duration
	rateHolds                 uint64
	rateHeld                  time.Duration // holds that ended
	returned                  uint64        // buffers whose pages went back to the kernel
	hist                      Histogram
}

// New maps the slab and cuts it into buffers.
func New(cfg Config) (*Pool, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	slab, err := allocSlab(cfg.Buffers*cfg.BufSize, cfg.Prefault)
	if err != nil {
		return nil, err
	}
	p := &Pool{cfg: cfg, slab: slab, bufs: make([]Buf, cfg.Buffers), epoch: time.Now()}
	p.policy = newPolicy(cfg.Buffers, cfg.MaxPerSource)
	for i := range p.bufs {
		off := i * cfg.BufSize
		p.bufs[i] = Buf{p: p, idx: int32(i), data: slab[off : off+cfg.BufSize : off+cfg.BufSize]}
	}
	return p, nil
}

// Config returns the pool's configuration with defaults filled in.
func (p *Pool) Config() Config { return p.cfg }

// BufSize returns the size of every buffer.
func (p *Pool) BufSize() int { return p.cfg.BufSize }

// Len returns the number of buffers.
func (p *Pool) Len() int { return len(p.bufs) }

// Iovecs describes the slab as one iovec per buffer, in index order, as
// the kernel takes it to register io_uring fixed buffers, for a caller
// that registers them (no runner of sluice does). The memory stays valid
// until Close succeeds.
func (p *Pool) Iovecs() []unix.Iovec {
	iovs := make([]unix.Iovec, len(p.bufs))
	for i := range p.bufs {
		iovs[i].Base = &p.bufs[i].data[0]
		iovs[i].SetLen(p.cfg.BufSize)
	}
	return iovs
}

// Close unmaps the slab. It fails with ErrOutstanding while any buffer is
// held, because the memory may still be in use by a consumer or the kernel.
// Close is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if inUse := len(p.bufs) - len(p.free); inUse > 0 {
		return fmt.Errorf("%w: %d of %d still held", ErrOutstanding, inUse, len(p.bufs))
	}
	return p.unmapLocked()
}

// CloseWhenIdle closes the pool now if no buffer is held, and otherwise
// when the last held buffer is released: an owner that has stopped every
// source calls it when the consumers may still be working through the
// chunks they were given. From the call on, nothing more is lent out
// (acquires fail as on a closed pool), and the buffers still held are
// released as usual. It returns the error of an unmap done now. It is
// idempotent, and Close may still be called.
func (p *Pool) CloseWhenIdle() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closing = true
	if len(p.free) < len(p.bufs) {
		return nil
	}
	return p.unmapLocked()
}

func (p *Pool) unmapLocked() error {
	p.closed = true
	p.ret.stopLocked()
	for i := range p.bufs {
		p.bufs[i].data = nil
	}
	return freeSlab(p.slab)
}

// Join opens an account for a source. Every buffer the source acquires is
// charged to its account until released. Join allocates; nothing on the
// account's acquire and release paths does.
func (p *Pool) Join(id SourceID) *Account {
	a := &Account{p: p, id: id}
	p.mu.Lock()
	p.accounts++
	p.mu.Unlock()
	return a
}

// Release returns b to the pool. It panics if b belongs to another pool or
// was already released: both are bugs that would otherwise corrupt data.
// Holders that may keep copies of a lease release with ReleaseLease.
func (p *Pool) Release(b *Buf) {
	if b == nil || b.p != p {
		panic("pool: release of a buffer that belongs to another pool")
	}
	p.mu.Lock()
	if b.owner == nil {
		p.mu.Unlock()
		panic(fmt.Sprintf("pool: double release of buffer %d", b.idx))
	}
	p.releaseLocked(b)
}

// ReleaseLease returns b to the pool if lease (from Buf.Lease, taken
// while b was held) is still b's current lease, and reports whether it
// did. A release under a lease that has ended (b was released already,
// and maybe lent out again since) is a no-op that returns false and is
// counted in Stats.StaleReleases: it can never free a buffer someone
// else now holds. It serves holders that hand out copies of a lease, any
// of which may be released: the first release wins.
func (p *Pool) ReleaseLease(b *Buf, lease uint64) bool {
	if b == nil || b.p != p {
		panic("pool: release of a buffer that belongs to another pool")
	}
	p.mu.Lock()
	if b.owner == nil || b.lease != lease {
		p.st.stale++
		p.mu.Unlock()
		return false
	}
	p.releaseLocked(b)
	return true
}

// releaseLocked takes b home and hands it on. It unlocks p.mu.
func (p *Pool) releaseLocked(b *Buf) {
	a := b.owner
	b.owner = nil
	b.held.Store(false)
	if invariants {
		poison(b.data)
	}
	p.st.released++
	notify := p.grantLocked(p.policy.release(a, b.idx))
	if b.owner == nil { // not handed on at once
		p.freedLocked(b)
	}
	p.homeLocked()
	p.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// grantLocked carries out the policy's grant of buffer idx to a waiting
// account a, if a is not nil: the buffer is reserved for a until it claims
// it, and its wait is counted. It returns the function that tells a so,
// which the caller calls once it has unlocked p.mu.
func (p *Pool) grantLocked(a *Account, idx int32) func() {
	if a == nil {
		return nil
	}
	w := a.w
	wait := time.Since(p.epoch) - w.since
	p.st.waitTotal += wait
	p.st.hist.record(wait)
	w.waitTotal += wait
	w.granted = p.lendLocked(a, idx)
	return w.notify
}

// lendLocked lends buffer idx, which the policy charged to a, under a new
// lease.
func (p *Pool) lendLocked(a *Account, idx int32) *Buf {
	b := &p.bufs[idx]
	b.owner = a
	b.lease++
	if !b.resident {
		b.resident = true // its holder writes it
		p.resident++
	}
	b.held.Store(true)
	a.acquired++
	p.st.acquired++
	if p.onGrant != nil {
		p.onGrant(a)
	}
	return b
}

// homeLocked runs when a buffer came home and no waiter took it: once
// every buffer is home, it tells WaitIdle callers, and unmaps the slab
// after CloseWhenIdle.
func (p *Pool) homeLocked() {
	if len(p.free) != len(p.bufs) {
		return
	}
	p.wakeIdleLocked()
	if p.closing && !p.closed {
		// The slab is mapped and unused: munmap cannot fail on it, and
		// the release that got here has no one to report to.
		_ = p.unmapLocked()
	}
}

// wakeIdleLocked tells WaitIdle callers once every buffer is home.
func (p *Pool) wakeIdleLocked() {
	if p.idle != nil && len(p.free) == len(p.bufs) {
		close(p.idle)
		p.idle = nil
	}
}

// WaitIdle blocks until no buffer is held or ctx ends. Owners use it at
// shutdown to wait for consumers to release their last buffers.
func (p *Pool) WaitIdle(ctx context.Context) error {
	p.mu.Lock()
	if len(p.free) == len(p.bufs) {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
