package uring

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Arena is a bump allocator over an anonymous mapping, for memory the kernel
// reads or writes after the submitting call has returned: timespecs,
// msghdrs, iovecs, socket addresses, eventfd slots, receive buffers. The Go
// garbage collector neither moves nor scans it, so it may be handed to the
// kernel as a bare address, but values placed in it must not hold the only
// reference to Go heap memory.
//
// An Arena is not safe for concurrent use. Its memory stays valid until
// Close, which must come after every operation using it has completed.
type Arena struct {
	mem  []byte
	used int
}

// NewArena maps size bytes (rounded up to whole pages), populated and zeroed.
func NewArena(size int) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("ring: arena: size %d is not positive", size)
	}
	page := unix.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ring: arena: mmap %d bytes: %w", size, err)
	}
	return &Arena{mem: mem}, nil
}

// Alloc returns n zeroed bytes aligned to align, a power of two (0 means 16).
func (a *Arena) Alloc(n, align int) ([]byte, error) {
	if align <= 0 {
		align = 16
	}
	if align&(align-1) != 0 {
		return nil, fmt.Errorf("ring: arena: alignment %d is not a power of two", align)
	}
	if a.mem == nil {
		return nil, ErrClosed
	}
	base := uintptr(unsafe.Pointer(&a.mem[0]))
	start := int((base+uintptr(a.used)+uintptr(align-1))&^uintptr(align-1) - base)
	if n < 0 || start+n > len(a.mem) {
		return nil, fmt.Errorf("ring: arena: %d bytes do not fit (%d of %d used)", n, a.used, len(a.mem))
	}
	a.used = start + n
	b := a.mem[start : start+n : start+n]
	clear(b)
	return b, nil
}

// Reset makes the whole arena free again. Nothing allocated before may still
// be in use by the kernel or by Go code.
func (a *Arena) Reset() { a.used = 0 }

// Len returns the size of the mapping.
func (a *Arena) Len() int { return len(a.mem) }

// Close unmaps the arena. Later calls return nil.
func (a *Arena) Close() error {
	if a.mem == nil {
		return nil
	}
	err := unix.Munmap(a.mem)
	a.mem, a.used = nil, 0
	if err != nil {
		return fmt.Errorf("ring: arena: munmap: %w", err)
	}
	return nil
}

// ArenaAlloc places a zero T in a, suitably aligned. T must not contain Go
// pointers to heap memory: the collector does not scan the arena.
func ArenaAlloc[T any](a *Arena) (*T, error) {
	var zero T
	b, err := a.Alloc(int(unsafe.Sizeof(zero)), int(unsafe.Alignof(zero)))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return &zero, nil
	}
	return (*T)(unsafe.Pointer(&b[0])), nil
}
