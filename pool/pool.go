package pool

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits on a pool's shape.
const (
	// MinBufSize is the smallest buffer: one page.
	MinBufSize = 4 << 10
	// MaxBufSize is the largest buffer io_uring accepts as one fixed buffer.
	MaxBufSize = 1 << 30
	// MaxBuffers is the most buffers a pool may have: io_uring's limit on
	// registered buffers, so that every index is a valid fixed-buffer index.
	MaxBuffers = 1 << 14
	// DefaultMaxBytes caps the slab when Config.MaxBytes is zero.
	DefaultMaxBytes = 4 << 30
)

var (
	// ErrClosed is returned by operations on a closed pool.
	ErrClosed = errors.New("pool: closed")
	// ErrLeft is returned by operations on an account that has left.
	ErrLeft = errors.New("pool: account has left")
	// ErrOutstanding is returned by Close while buffers are still held.
	ErrOutstanding = errors.New("pool: buffers outstanding")
)

// ConfigError reports a bad Config field.
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("pool: config: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Config is the shape of a pool. BufSize and Buffers have no defaults: a
// zero is an error, because the right size depends on the workload.
type Config struct {
	// BufSize is the size of each buffer in bytes: a power of two, at
	// least MinBufSize and at most MaxBufSize.
	BufSize int `yaml:"buf_size"`
	// Buffers is the number of buffers, from 1 to MaxBuffers.
	Buffers int `yaml:"buffers"`
	// MaxPerSource caps the buffers one source may hold, waiting or not.
	// Zero means max(1, Buffers/4).
	MaxPerSource int `yaml:"max_per_source"`
	// MaxBytes caps Buffers*BufSize. Zero means DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// Prefault touches every page of the slab when it is mapped
	// (MAP_POPULATE), so that no read ever waits for the kernel to fault
	// a page in, at the price of holding the whole slab resident from
	// New on. Without it, a page becomes resident when it is first
	// written, and an idle pool costs next to nothing; a page once
	// touched stays resident until its buffer has stayed free for
	// ReturnAfter. Only Linux maps the slab; other systems ignore it.
	Prefault bool `yaml:"prefault"`
	// ReturnAfter gives the pages of a buffer that has stayed free this
	// long back to the kernel (madvise MADV_DONTNEED), so that a pool
	// that took traffic in a burst shrinks back to what its traffic keeps
	// using, as Go's heap does; a buffer lent out again is faulted in
	// afresh, zeroed. Buffers go back between ReturnAfter and twice it
	// after their release, the least recently used first. Zero means
	// DefaultReturnAfter; negative keeps every page, as does Prefault.
	// Only Linux returns pages.
	ReturnAfter time.Duration `yaml:"return_after"`
}

// Validate checks c and returns it with defaults filled in. New calls it;
// it is exported so that owners of a Config can check it early.
func (c Config) Validate() (Config, error) {
	if c.BufSize < MinBufSize || c.BufSize > MaxBufSize || bits.OnesCount(uint(c.BufSize)) != 1 {
		return c, &ConfigError{"BufSize", c.BufSize,
			fmt.Sprintf("must be a power of two from %d to %d", MinBufSize, MaxBufSize)}
	}
	if c.Buffers < 1 || c.Buffers > MaxBuffers {
		return c, &ConfigError{"Buffers", c.Buffers, fmt.Sprintf("must be from 1 to %d", MaxBuffers)}
	}
	if c.MaxBytes < 0 {
		return c, &ConfigError{"MaxBytes", c.MaxBytes, "must not be negative"}
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if total := int64(c.Buffers) * int64(c.BufSize); total > c.MaxBytes {
		return c, &ConfigError{"Buffers", c.Buffers,
			fmt.Sprintf("Buffers*BufSize = %d bytes exceeds MaxBytes %d", total, c.MaxBytes)}
	}
	if c.MaxPerSource < 0 || c.MaxPerSource > c.Buffers {
		return c, &ConfigError{"MaxPerSource", c.MaxPerSource, fmt.Sprintf("must be from 0 to Buffers (%d)", c.Buffers)}
	}
	if c.MaxPerSource == 0 {
		c.MaxPerSource = max(1, c.Buffers/4)
	}
	if c.ReturnAfter == 0 {
		c.ReturnAfter = DefaultReturnAfter
	}
	return c, nil
}

// SourceID names the source an account belongs to. The pool attaches no
// meaning to it beyond accounting.
type SourceID uint64

// Pool is a fixed set of equal buffers cut from one slab. It is safe for
// concurrent use. The pool owns the slab; a Buf is lent to one account at a
// time until it is released.
type Pool struct {
	cfg  Config
	slab []byte
	bufs []Buf

	epoch time.Time // what Account.since counts from

	mu       sync.Mutex
	closed   bool
	closing  bool     // CloseWhenIdle was called: the last buffer home unmaps
	free     []int32  // indices of free buffers, used as a stack
	hungry   waitList // waiting accounts that hold no buffer
	greedy   waitList // waiting accounts that hold some, but fewer than the cap
	parked   int      // waiting accounts at the cap, in no list
	rateHeld int      // waiting accounts held by their rate limit, in no list
	accounts int
	idle     chan struct{} // closed when no buffer is held; nil until WaitIdle asks
	ret      returner      // gives idle buffers' pages back (return.go)
	resident int           // buffers with resident set
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
	p := &Pool{cfg: cfg, slab: slab, bufs: make([]Buf, cfg.Buffers), free: make([]int32, cfg.Buffers), epoch: time.Now()}
	p.hungry.id, p.greedy.id = inHungry, inGreedy
	for i := range p.bufs {
		off := i * cfg.BufSize
		p.bufs[i] = Buf{p: p, idx: int32(i), data: slab[off : off+cfg.BufSize : off+cfg.BufSize]}
		// Hand out low indices first.
		p.free[i] = int32(cfg.Buffers - 1 - i)
	}
	return p, nil
}

// Config returns the pool's configuration with defaults filled in.
func (p *Pool) Config() Config { return p.cfg }

// BufSize returns the size of every buffer.
func (p *Pool) BufSize() int { return p.cfg.BufSize }

// Len returns the number of buffers.
func (p *Pool) Len() int { return len(p.bufs) }

// Iovecs describes the slab as one iovec per buffer, in index order, for
// registration as io_uring fixed buffers. The memory stays valid until
// Close succeeds.
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
	a.held--
	p.st.released++
	if a.state == waiting {
		p.requeueLocked(a)
	}
	p.pushFreeLocked(b)
	notify := p.dispatchLocked()
	p.homeLocked()
	p.mu.Unlock()
	if notify != nil {
		notify()
	}
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

// requeueLocked moves a waiting account whose holdings just dropped into
// the list its holdings now put it in.
func (p *Pool) requeueLocked(a *Account) {
	switch {
	case a.in == inNone && int(a.held) < p.cfg.MaxPerSource: // was parked at the cap
		p.parked--
		p.enqueueLocked(a)
	case a.in == inGreedy && a.held == 0:
		p.greedy.remove(a)
		p.hungry.push(a)
	}
}

// enqueueLocked puts a waiting account in the list its holdings call for.
func (p *Pool) enqueueLocked(a *Account) {
	switch {
	case a.held == 0:
		p.hungry.push(a)
	case int(a.held) < p.cfg.MaxPerSource:
		p.greedy.push(a)
	default:
		a.in = inNone
		p.parked++
	}
}

// dispatchLocked reserves a free buffer for the first eligible waiter, if
// there is one, and returns the function that tells it so. Hungry waiters
// come first; greedy ones only when no hungry one waits. At most one
// buffer is freed per operation, so one grant suffices.
func (p *Pool) dispatchLocked() func() {
	if len(p.free) == 0 {
		return nil
	}
	var a *Account
	switch {
	case p.hungry.head != nil:
		a = p.hungry.pop()
	case p.greedy.head != nil:
		a = p.greedy.pop()
	default:
		return nil
	}
	w := a.w
	wait := time.Since(p.epoch) - w.since
	p.st.waitTotal += wait
	p.st.hist.record(wait)
	w.waitTotal += wait
	w.granted = p.takeLocked(a)
	a.state = granted
	return w.notify
}

// takeLocked pops a free buffer and charges it to a.
func (p *Pool) takeLocked(a *Account) *Buf {
	idx := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	b := &p.bufs[idx]
	b.owner = a
	b.lease++
	if !b.resident {
		b.resident = true // its holder writes it
		p.resident++
	}
	b.held.Store(true)
	a.held++
	a.acquired++
	p.st.acquired++
	if p.onGrant != nil {
		p.onGrant(a)
	}
	return b
}

// Stats is a snapshot of a pool's accounting.
type Stats struct {
	Buffers int
	BufSize int
	InUse   int
	Free    int
	Waiters int // accounts queued for a buffer, at the cap or not
	// RateHeld is the accounts their rate limit holds now (SetRate),
	// which wait for their limit, not for a buffer: they are not among
	// Waiters, and their holds count in RateHolds, not in Waits.
	RateHeld int
	// RateHolds counts the times a rate limit held an account, and
	// RateHeldTime the time accounts spent so held, in holds that ended.
	RateHolds    uint64
	RateHeldTime time.Duration
	Accounts     int // accounts that joined and have not left
	Acquired     uint64
	Released     uint64
	// Waits counts acquires that had to queue for a buffer, whether or
	// not they were later cancelled; a rate limit's hold is not one, nor
	// is the grant that ends it when a buffer is free. WaitTime and
	// WaitHist cover the time from queueing to the grant, for those that
	// were granted.
	Waits    uint64
	WaitTime time.Duration
	WaitHist Histogram
	// StaleReleases counts releases under a lease that had already ended
	// (ReleaseLease): a copy of a chunk released after another copy.
	// They free nothing.
	StaleReleases uint64
	// Resident counts the buffers whose pages may be resident: those lent
	// out since their pages last went back to the kernel (ReturnAfter),
	// held or free. Returned counts the times a free buffer's pages went
	// back.
	Resident int
	Returned uint64
	// Closed says the slab is unmapped: Close succeeded, or CloseWhenIdle
	// was called and every buffer has come home since.
	Closed bool
}

// Stats returns a consistent snapshot.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Buffers:  len(p.bufs),
		BufSize:  p.cfg.BufSize,
		InUse:    len(p.bufs) - len(p.free),
		Free:     len(p.free),
		Waiters:  p.hungry.n + p.greedy.n + p.parked,
		RateHeld: p.rateHeld,

		RateHolds:    p.st.rateHolds,
		RateHeldTime: p.st.rateHeld,
		Accounts:     p.accounts,
		Acquired:     p.st.acquired,
		Released:     p.st.released,
		Waits:        p.st.waits,
		WaitTime:     p.st.waitTotal,
		WaitHist:     p.st.hist,

		StaleReleases: p.st.stale,
		Resident:      p.resident,
		Returned:      p.st.returned,
		Closed:        p.closed,
	}
}

// Buf is one buffer of the pool. Its index is its slot in the slab, which
// is also its io_uring fixed-buffer index. A Buf is owned by one account
// from acquisition until Release; it is not safe for concurrent use by
// several goroutines, but it may be handed from one to another.
type Buf struct {
	p     *Pool
	idx   int32
	data  []byte
	owner *Account    // guarded by p.mu
	held  atomic.Bool // mirrors owner != nil, for lock-free misuse checks
	// lease numbers the loans of the buffer: it changes at every grant,
	// under p.mu, while the buffer is free, so its holder may read it
	// without the lock.
	lease uint64
	// resident says the buffer may hold pages (it was lent out since they
	// last went back), and freed is the returner's tick when it last came
	// home (return.go). Guarded by p.mu.
	resident bool
	freed    uint64
}

// Bytes returns the whole buffer. It panics if the buffer is not held: a
// use after release would read another source's data.
func (b *Buf) Bytes() []byte {
	if !b.held.Load() {
		panic(fmt.Sprintf("pool: use of buffer %d after release", b.idx))
	}
	return b.data
}

// Lease identifies the current loan of the buffer, for ReleaseLease. Only
// its holder may call it, while it holds the buffer.
func (b *Buf) Lease() uint64 { return b.lease }

// Index returns the buffer's slot in the slab.
func (b *Buf) Index() int { return int(b.idx) }

// Release returns the buffer to its pool; see Pool.Release.
func (b *Buf) Release() { b.p.Release(b) }

// ReleaseLease returns the buffer to its pool if lease is its current
// lease; see Pool.ReleaseLease.
func (b *Buf) ReleaseLease(lease uint64) bool { return b.p.ReleaseLease(b, lease) }

func poison(b []byte) {
	for i := range b {
		b[i] = 0xdb
	}
}

type waitState uint8

const (
	idle waitState = iota
	waiting
	granted
)

// Account charges buffers to one source and carries its place in the wait
// queues. Methods are safe for concurrent use, but an account is meant to
// be driven by one runner at a time: at most one wait may be pending.
type Account struct {
	p  *Pool
	id SourceID

	// Guarded by p.mu. An engine keeps an account per connection, most
	// of them idle and never waiting, so each field is no wider than its
	// values (held is bounded by MaxBuffers, the wait list an account is
	// in is named rather than pointed to) and what only a wait uses is in
	// w, made on the account's first wait.
	held       int32
	state      waitState
	left       bool
	in         listID // the wait list a waiting account is in; inNone when parked
	prev, next *Account
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

// listID names one of a pool's wait lists.
type listID uint8

const (
	inNone listID = iota
	inHungry
	inGreedy
	inRate // held by its rate limit (limit.go), in no list
)

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

func (a *Account) tryLocked() (*Buf, bool) {
	p := a.p
	switch {
	case a.state == granted:
		return a.claimLocked(), true
	case p.closed || p.closing || a.left || a.state == waiting:
		return nil, false
	case len(p.free) == 0 || int(a.held) >= p.cfg.MaxPerSource:
		return nil, false
	case a.owedLocked(time.Since(p.epoch)) > 0:
		return nil, false
	}
	// Free buffers imply that nobody eligible waits (every release is
	// dispatched at once), so first come, first served is fair here.
	return p.takeLocked(a), true
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
		a.state = waiting
		if a.w == nil {
			a.w = new(accountWait)
		}
		a.w.notify = notify
		now := time.Since(p.epoch)
		if d := a.owedLocked(now); d > 0 {
			// Held by its rate limit: a hold, not a wait for a buffer.
			p.holdLocked(a, d, now)
		} else {
			p.queueLocked(a, now)
		}
	}
	return nil, false, nil
}

// queueLocked queues a waiting account for a buffer from now on, and
// counts the wait.
func (p *Pool) queueLocked(a *Account, now time.Duration) {
	a.w.since = now
	a.w.waits++
	p.st.waits++
	p.enqueueLocked(a)
}

// owedLocked returns how long a must wait for its rate limit at now: 0
// without one, or when it owes nothing.
func (a *Account) owedLocked(now time.Duration) time.Duration {
	if a.w == nil || a.w.lim == nil {
		return 0
	}
	return a.w.lim.owed(now)
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
	b := a.w.granted
	a.w.granted, a.w.notify, a.state = nil, nil, idle
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

func (a *Account) cancelLocked() func() {
	p := a.p
	switch a.state {
	case waiting:
		switch a.in {
		case inHungry:
			p.hungry.remove(a)
		case inGreedy:
			p.greedy.remove(a)
		case inRate:
			p.endHoldLocked(a, time.Since(p.epoch))
		default:
			p.parked--
		}
	case granted:
		b := a.w.granted
		b.owner = nil
		b.held.Store(false)
		a.held--
		a.acquired--
		p.st.acquired--
		p.pushFreeLocked(b)
		p.homeLocked()
	default:
		return nil
	}
	a.w.granted, a.w.notify, a.state = nil, nil, idle
	return p.dispatchLocked()
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

// AccountStats is a snapshot of one account.
type AccountStats struct {
	Held     int
	Acquired uint64
	// Waits counts the account's queueings for a buffer and WaitTime
	// their time to the grant, as Stats counts them for the pool.
	Waits    uint64
	WaitTime time.Duration
	// Waiting says a wait is pending: for a buffer, or for its rate limit
	// (RateLimited).
	Waiting bool
	// RateLimited says its rate limit holds it now. RateHolds counts the
	// times its rate limit held it (SetRate), and RateHeld is the time it
	// spent so held, the hold in progress included.
	RateLimited bool
	RateHolds   uint64
	RateHeld    time.Duration
}

// Stats returns a snapshot of the account.
func (a *Account) Stats() AccountStats {
	p := a.p
	p.mu.Lock()
	defer p.mu.Unlock()
	st := AccountStats{Held: int(a.held), Acquired: a.acquired, Waiting: a.state == waiting}
	if w := a.w; w != nil {
		st.Waits, st.WaitTime = w.waits, w.waitTotal
	}
	if l := a.limiter(); l != nil {
		st.RateHolds, st.RateHeld = l.holds, l.heldTotal
		if a.state == waiting && a.in == inRate {
			st.RateLimited = true
			st.RateHeld += time.Since(p.epoch) - l.heldSince
		}
	}
	return st
}

// waitList is an intrusive FIFO of accounts.
type waitList struct {
	head, tail *Account
	n          int
	id         listID // what an account in the list has in Account.in
}

func (l *waitList) push(a *Account) {
	a.in, a.prev, a.next = l.id, l.tail, nil
	if l.tail != nil {
		l.tail.next = a
	} else {
		l.head = a
	}
	l.tail = a
	l.n++
}

func (l *waitList) pop() *Account {
	a := l.head
	l.remove(a)
	return a
}

func (l *waitList) remove(a *Account) {
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		l.head = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	} else {
		l.tail = a.prev
	}
	a.in, a.prev, a.next = inNone, nil, nil
	l.n--
}

// Histogram counts durations in power-of-two buckets of nanoseconds:
// bucket i holds durations in [2^i, 2^(i+1)) ns, bucket 0 also holds zero.
type Histogram struct {
	Buckets [48]uint64
}

func (h *Histogram) record(d time.Duration) {
	i := 0
	if d > 0 {
		i = min(bits.Len64(uint64(d))-1, len(h.Buckets)-1)
	}
	h.Buckets[i]++
}

// Count returns the number of recorded durations.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Buckets {
		n += c
	}
	return n
}

// Quantile returns an upper bound for the q-quantile (0 < q <= 1): the top
// of the bucket that holds it. It returns 0 for an empty histogram.
func (h Histogram) Quantile(q float64) time.Duration {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.Buckets {
		seen += c
		if seen >= rank {
			return time.Duration(uint64(1) << (i + 1))
		}
	}
	return time.Duration(uint64(1) << len(h.Buckets))
}
