package pool

import (
	"fmt"
	"sync/atomic"
)

// Buf is one buffer of the pool. Its index is its slot in the slab, and in
// Iovecs. A Buf is owned by one account from acquisition until Release; it
// is not safe for concurrent use by several goroutines, but it may be
// handed from one to another.
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
