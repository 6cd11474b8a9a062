//go:build linux

package pool

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// allocSlab maps an anonymous region off the Go heap, pre-faulted if
// prefault is set. The kernel may read and write it asynchronously
// (io_uring), which is why it must never move or be collected.
func allocSlab(size int, prefault bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if prefault {
		flags |= unix.MAP_POPULATE
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("pool: mmap slab of %d bytes: %w", size, err)
	}
	return b, nil
}

func freeSlab(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("pool: munmap slab: %w", err)
	}
	return nil
}

// slabReturns says that returnPages gives pages back.
const slabReturns = true

// returnPages gives the pages of b, a part of the slab, back to the
// kernel: the next write faults in zeroed pages.
func returnPages(b []byte) error {
	if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("pool: madvise: %w", err)
	}
	return nil
}
