//go:build invariants

package driver

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/pool"
)

// owners maps every buffer a Lane holds to that Lane's incarnation, across
// all lanes, so that a buffer held by two lanes at once fails at once.
// Only invariants builds keep it.
var owners struct {
	mu   sync.Mutex
	m    map[*pool.Buf]uint64
	next atomic.Uint64
}

// invariants checks, in invariants builds, that a buffer is held by exactly
// one lane, that a lane finishes exactly once, and that nothing is emitted
// or committed after it finished.
type invariants struct {
	id       uint64 // the incarnation: a Lane may be copied, and stays itself
	finished bool
}

func (v *invariants) reset() { *v = invariants{id: owners.next.Add(1)} }

func (v *invariants) held(b *pool.Buf) {
	v.live()
	owners.mu.Lock()
	defer owners.mu.Unlock()
	if owners.m == nil {
		owners.m = map[*pool.Buf]uint64{}
	}
	if _, ok := owners.m[b]; ok {
		panic(fmt.Sprintf("driver: invariants: buffer %d held by two lanes", b.Index()))
	}
	owners.m[b] = v.id
}

func (v *invariants) gone(b *pool.Buf) {
	if b == nil {
		return
	}
	owners.mu.Lock()
	defer owners.mu.Unlock()
	if o, ok := owners.m[b]; !ok || o != v.id {
		panic(fmt.Sprintf("driver: invariants: buffer %d given up by a lane that did not hold it", b.Index()))
	}
	delete(owners.m, b)
}

func (v *invariants) live() {
	if v.finished {
		panic("driver: invariants: a lane used after Finish")
	}
}

func (v *invariants) finish() {
	v.live()
	v.finished = true
}
