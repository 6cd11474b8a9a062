package srcstest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// DatagramRecorder is an Emitter for datagram lanes. It checks every chunk (the
// Datagrams flag, whole framed datagrams), keeps each lane's datagrams,
// chunk flags and dropped sizes, and hands the chunk on to a Recorder,
// which checks the Emitter contract and releases the buffer.
type DatagramRecorder struct {
	*Recorder

	mu     sync.Mutex
	got    map[srcs.ID][][]byte
	chunks map[srcs.ID][]DatagramChunk
	drops  map[srcs.ID][]int
	errs   []string
}

// DatagramChunk is what a DatagramRecorder saw of one chunk.
type DatagramChunk struct {
	Flags     srcs.Flags
	Datagrams int           // whole datagrams in it
	Hold      time.Duration // from its first byte to its emit
}

var _ contract.DatagramDropReporter = (*DatagramRecorder)(nil)

// NewDatagramRecorder returns an empty DatagramRecorder.
func NewDatagramRecorder() *DatagramRecorder {
	return &DatagramRecorder{
		Recorder: NewRecorder(),
		got:      map[srcs.ID][][]byte{},
		chunks:   map[srcs.ID][]DatagramChunk{},
		drops:    map[srcs.ID][]int{},
	}
}

// Emit checks and records a chunk, then hands it to the Recorder.
func (r *DatagramRecorder) Emit(l *contract.Lane, b *pool.Buf, n int, flags srcs.Flags, first time.Time) {
	data := b.Bytes()[:n]
	r.mu.Lock()
	if flags&srcs.Datagrams == 0 {
		r.errs = append(r.errs, fmt.Sprintf("lane %d: chunk without the Datagrams flag (%v)", l.ID, flags))
	}
	count := 0
	if err := srcs.ForEachDatagram(data, func(p []byte) bool {
		r.got[l.ID] = append(r.got[l.ID], bytes.Clone(p))
		count++
		return true
	}); err != nil {
		r.errs = append(r.errs, fmt.Sprintf("lane %d: %v", l.ID, err))
	}
	if full := n == len(b.Bytes()); full == (flags&srcs.Partial != 0) {
		r.errs = append(r.errs, fmt.Sprintf("lane %d: %d of %d bytes with flags %v", l.ID, n, len(b.Bytes()), flags))
	}
	r.chunks[l.ID] = append(r.chunks[l.ID], DatagramChunk{flags, count, time.Since(first)})
	r.mu.Unlock()
	r.Recorder.Emit(l, b, n, flags, first)
}

// DatagramDropped implements contract.DatagramDropReporter.
func (r *DatagramRecorder) DatagramDropped(l *contract.Lane, size int) {
	r.mu.Lock()
	r.drops[l.ID] = append(r.drops[l.ID], size)
	r.mu.Unlock()
}

// Datagrams returns the datagrams of lane id, in order.
func (r *DatagramRecorder) Datagrams(id srcs.ID) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

// Chunks returns what was seen of lane id's chunks.
func (r *DatagramRecorder) Chunks(id srcs.ID) []DatagramChunk {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]DatagramChunk(nil), r.chunks[id]...)
}

// Drops returns the sizes of lane id's dropped datagrams.
func (r *DatagramRecorder) Drops(id srcs.ID) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.drops[id]...)
}

// Err returns the violations of the Emitter contract and of the
// datagram framing seen so far, or nil.
func (r *DatagramRecorder) Err() error {
	r.mu.Lock()
	errs := r.errs
	r.mu.Unlock()
	return errors.Join(r.Recorder.Err(), errors.Join(func() []error {
		var es []error
		for _, e := range errs {
			es = append(es, errors.New(e))
		}
		return es
	}()...))
}
