package uring

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Waker wakes a ring's owner thread from other goroutines: an eventfd that
// the ring keeps a READ armed on. Wake makes that read complete, so a thread
// blocked in [Ring.SubmitAndWait] returns and can look at its command queue.
//
// Wake is safe for concurrent use; Fd, Arm, Count and Close belong to the
// ring's owner.
// Wakes coalesce: between two Arms, only the first Wake writes the eventfd.
// The owner's loop, on the wake CQE, calls Arm (which re-enables writes and
// queues the next read) and only then drains its command queue, so a command
// posted before a Wake is always seen.
//
// The read lands in an 8-byte slot in the Waker's own anonymous mapping, so
// it never points into the Go heap. Close the Waker after the ring it was
// armed on.
type Waker struct {
	mu      sync.RWMutex // write-locked only by Close, so Wake never writes a closed fd
	fd      int
	pending atomic.Bool
	writes  atomic.Uint64 // eventfd writes Wake made
	mem     []byte        // one page; the first 8 bytes take the eventfd reads
	one     [8]byte
}

// NewWaker creates a non-blocking eventfd (io_uring then polls it instead of
// parking a worker thread on the read).
func NewWaker() (*Waker, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("ring: waker: eventfd: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: waker: mmap: %w", err)
	}
	w := &Waker{fd: fd, mem: mem}
	*(*uint64)(unsafe.Pointer(&w.one)) = 1
	return w, nil
}

// Fd returns the eventfd.
func (w *Waker) Fd() int { return w.fd }

// Wake makes the armed read complete. It may be called from any goroutine,
// any number of times; it writes only when no wake is pending.
func (w *Waker) Wake() error {
	if !w.pending.CompareAndSwap(false, true) {
		return nil
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.fd < 0 {
		return ErrClosed
	}
	w.writes.Add(1)
	// EAGAIN means the counter is saturated: a wake is pending anyway.
	if _, err := unix.Write(w.fd, w.one[:]); err != nil && err != unix.EAGAIN {
		return fmt.Errorf("ring: waker: write: %w", err)
	}
	return nil
}

// Arm prepares s to read the eventfd, and lets the next Wake write again.
// Call it once before the first wait, and again for every wake CQE, before
// draining the command queue.
func (w *Waker) Arm(s *SQE) {
	w.pending.Store(false)
	s.PrepRead(w.fd, w.mem[:8], 0)
}

// Writes returns how many eventfd writes Wake has made: wakes that found
// none pending. Any goroutine.
func (w *Waker) Writes() uint64 { return w.writes.Load() }

// Count returns the eventfd value the last completed read delivered: the
// number of writes it collected.
func (w *Waker) Count() uint64 { return *(*uint64)(unsafe.Pointer(&w.mem[0])) }

// Close closes the eventfd and unmaps the slot. Call it after the ring the
// Waker was armed on is closed. Later calls return nil.
func (w *Waker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	unix.Munmap(w.mem)
	w.mem = nil
	if err != nil {
		return fmt.Errorf("ring: waker: close: %w", err)
	}
	return nil
}
