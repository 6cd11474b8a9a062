// A uring worker's registered file table: where the sockets of accepted
// connections live once their sources hand them over (contract.HandOff), as
// direct descriptors that count against no descriptor limit.

package ring

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/uring"
	"github.com/sluice-io/sluice/srcs"
)

// defaultFileSlots caps a table sized from RLIMIT_NOFILE (FileSlots 0):
// 512 KiB of the kernel's memory per worker.
const defaultFileSlots = 1 << 16

// fileTable is a worker's registered file table. The worker registers it
// on the first connection it could hold, sized once; a slot is taken by
// a lane for its life and given back when the lane ends. Owned by the
// worker goroutine, except used, which Stats reads.
type fileTable struct {
	size  uint32   // slots registered; 0 until then
	next  uint32   // slots from next on were never used
	free  []uint32 // slots given back, reused first
	state tableState
	used  atomic.Int64 // slots holding a lane's file
	// scratch is UpdateFiles' argument, kept here so that taking a
	// connection allocates nothing.
	scratch [1]int32
}

type tableState uint8

const (
	tableUnset tableState = iota // not registered yet
	tableReady                   // registered: size slots
	tableOff                     // turned off, or registration failed
)

// fileSlots resolves RunnerConfig.FileSlots: negative turns the tables
// off (0), zero sizes them from the soft RLIMIT_NOFILE, which the kernel
// caps a table at.
func fileSlots(cfg int) uint32 {
	if cfg < 0 {
		return 0
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	lim := min(rl.Cur, uint64(math.MaxUint32))
	if cfg == 0 {
		return uint32(min(lim, defaultFileSlots))
	}
	return uint32(min(lim, uint64(cfg)))
}

// takeSlot returns a free slot of w's table, registering the table on
// first use. ok is false when there is none: the table is off, full, or
// could not be registered.
func (w *worker) takeSlot() (slot uint32, ok bool) {
	t := &w.files
	switch t.state {
	case tableOff:
		return 0, false
	case tableUnset:
		n := fileSlots(w.r.fileSlots)
		if n == 0 {
			t.state = tableOff
			return 0, false
		}
		if err := w.ring.RegisterFilesSparse(n); err != nil {
			t.state = tableOff
			w.r.log.Warn("ring: runner: no registered file table: connections keep their descriptors",
				"worker", w.id, "slots", n, "err", err)
			return 0, false
		}
		t.size, t.state = n, tableReady
	}
	if k := len(t.free); k > 0 {
		slot = t.free[k-1]
		t.free = t.free[:k-1]
		return slot, true
	}
	if t.next < t.size {
		t.next++
		return t.next - 1, true
	}
	return 0, false
}

// setSlot puts fd in a slot of w's table, or empties it with -1.
func (w *worker) setSlot(slot uint32, fd int32) error {
	w.files.scratch[0] = fd
	_, err := w.ring.UpdateFiles(slot, w.files.scratch[:])
	return err
}

// putSlot gives a slot that holds no file back.
func (w *worker) putSlot(slot uint32) { w.files.free = append(w.files.free, slot) }

// direct moves an accepted connection's socket into w's file table when
// its source hands it over (contract.HandOff): the lane then reads the slot
// with SQEFixedFile, the worker owns the socket, and the process's own
// descriptor is closed. A lane stays on its descriptor when the table
// has no slot for it, or the source is closed already.
func (w *worker) direct(ln *lane, src srcs.Source) {
	ho, ok := src.(contract.HandOff)
	if !ok || ln.mode != modeSock {
		return
	}
	slot, ok := w.takeSlot()
	if !ok {
		return
	}
	fd := int(ln.fd)
	if !ho.HandOff(fd) {
		w.putSlot(slot)
		return
	}
	if err := w.setSlot(slot, int32(fd)); err != nil {
		// The source gave the socket up: the lane owns it as it is. The
		// table is not used again, so this is said once.
		w.putSlot(slot)
		ln.owned = true
		w.files.state = tableOff
		w.r.log.Warn("ring: runner: registering a connection's socket failed: connections keep their descriptors",
			"worker", w.id, "err", err)
		return
	}
	unix.Close(fd) // the table holds the file now
	ln.fd, ln.fixed, ln.owned = int32(slot), true, true
	w.files.used.Add(1)
}

// release closes the descriptor of a lane that owns it, when it ends:
// its slot is emptied (the file is released once no request uses it) and
// taken back, or its descriptor closed.
func (w *worker) release(ln *lane) error {
	if !ln.owned {
		return nil
	}
	if !ln.fixed {
		return unix.Close(int(ln.fd))
	}
	err := w.setSlot(uint32(ln.fd), -1)
	if errors.Is(err, uring.ErrClosed) {
		// The ring is gone, and its table with it.
		w.files.used.Add(-1)
		return nil
	}
	if err != nil {
		// The slot keeps its file until the ring closes; never reuse it.
		return fmt.Errorf("ring: runner: worker %d: emptying file slot %d: %w", w.id, ln.fd, err)
	}
	w.putSlot(uint32(ln.fd))
	w.files.used.Add(-1)
	return nil
}
