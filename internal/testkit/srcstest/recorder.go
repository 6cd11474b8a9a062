package srcstest

import (
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// Castagnoli is the CRC-32C table the tests digest streams with.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Recorder is an contract.Emitter for runner tests. It checks the Emitter
// contract (no empty emits, no emit after Finish, one Finish per lane) and
// keeps, per lane, the byte count, the CRC-32C of the bytes in emit order,
// the number of chunks and partial chunks, and optionally the bytes
// themselves. By default it releases each buffer as soon as it has
// digested it; with Hold set it keeps them until ReleaseAll.
type Recorder struct {
	// Keep stores every lane's bytes, for exact comparisons.
	Keep bool
	// Hold keeps emitted buffers until ReleaseAll, to model a slow consumer.
	Hold bool

	mu       sync.Mutex
	lanes    map[srcs.ID]*LaneRecord
	held     []*pool.Buf
	errs     []string
	finished chan *LaneRecord
	emitted  chan struct{}
}

// LaneRecord is what a Recorder saw of one lane.
type LaneRecord struct {
	ID       srcs.ID
	Bytes    int64
	CRC      uint32
	Chunks   int
	Partials int
	Data     []byte // with Recorder.Keep
	Finished bool
	Err      error // the error Finish reported
	// MaxHoldTime is the largest delay seen between a chunk's first byte
	// and its emit.
	MaxHoldTime time.Duration
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{
		lanes:    map[srcs.ID]*LaneRecord{},
		finished: make(chan *LaneRecord, 1<<16),
		emitted:  make(chan struct{}, 1),
	}
}

func (r *Recorder) lane(id srcs.ID) *LaneRecord {
	lr := r.lanes[id]
	if lr == nil {
		lr = &LaneRecord{ID: id}
		r.lanes[id] = lr
	}
	return lr
}

// Emit implements contract.Emitter.
func (r *Recorder) Emit(l *contract.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	data := b.Bytes()[:n]
	now := time.Now()
	r.mu.Lock()
	lr := r.lane(l.ID)
	switch {
	case n <= 0:
		r.errs = append(r.errs, fmt.Sprintf("lane %d: emit of %d bytes", l.ID, n))
	case lr.Finished:
		r.errs = append(r.errs, fmt.Sprintf("lane %d: emit after Finish", l.ID))
	}
	lr.Bytes += int64(n)
	lr.CRC = crc32.Update(lr.CRC, Castagnoli, data)
	lr.Chunks++
	if flags&srcs.Partial != 0 {
		lr.Partials++
	}
	if d := now.Sub(first); d > lr.MaxHoldTime {
		lr.MaxHoldTime = d
	}
	if r.Keep {
		lr.Data = append(lr.Data, data...)
	}
	if r.Hold {
		r.held = append(r.held, b)
		b = nil
	}
	r.mu.Unlock()
	if b != nil {
		b.Release()
	}
	select {
	case r.emitted <- struct{}{}:
	default:
	}
}

// Finish implements contract.Emitter.
func (r *Recorder) Finish(l *contract.Lane, err error) {
	r.mu.Lock()
	lr := r.lane(l.ID)
	if lr.Finished {
		r.errs = append(r.errs, fmt.Sprintf("lane %d: second Finish (%v after %v)", l.ID, err, lr.Err))
	}
	lr.Finished = true
	lr.Err = err
	snap := *lr
	r.mu.Unlock()
	r.finished <- &snap
}

// Lane returns a copy of what was recorded for id.
func (r *Recorder) Lane(id srcs.ID) LaneRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.lane(id)
}

// Finished returns a channel that yields a snapshot of each lane as it
// finishes.
func (r *Recorder) Finished() <-chan *LaneRecord { return r.finished }

// Emitted returns a channel that is signalled (coalescing) after emits.
func (r *Recorder) Emitted() <-chan struct{} { return r.emitted }

// WaitFinished waits for n lanes to finish, or fails after timeout. It
// returns the finished lanes by id.
func (r *Recorder) WaitFinished(n int, timeout time.Duration) (map[srcs.ID]*LaneRecord, error) {
	got := map[srcs.ID]*LaneRecord{}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(got) < n {
		select {
		case lr := <-r.finished:
			got[lr.ID] = lr
		case <-deadline.C:
			return got, fmt.Errorf("srcstest: %d of %d lanes finished in %v", len(got), n, timeout)
		}
	}
	return got, nil
}

// ReleaseAll releases the buffers held because of Hold and returns how
// many there were.
func (r *Recorder) ReleaseAll() int {
	r.mu.Lock()
	held := r.held
	r.held = nil
	r.mu.Unlock()
	for _, b := range held {
		b.Release()
	}
	return len(held)
}

// Held returns the number of buffers held because of Hold.
func (r *Recorder) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// Err returns the contract violations seen, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("srcstest: emitter contract violated: %v", r.errs)
}
