package pool

import (
	"math/bits"
	"time"
)

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
		Waiters:  p.waiters(),
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
