//go:build linux

package pool

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// allocSlab maps an anonymous, pre-faulted region off the Go heap. The
// kernel may read and write it asynchronously (io_uring), which is why it
// must never move or be collected.
func allocSlab(size int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
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
