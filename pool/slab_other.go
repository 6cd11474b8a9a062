//go:build !linux

package pool

// allocSlab uses the Go heap where the slab is never handed to io_uring.
func allocSlab(size int, _ bool) ([]byte, error) { return make([]byte, size), nil }

func freeSlab([]byte) error { return nil }

// slabReturns says that the Go heap's slab keeps its pages: Go's own
// scavenger decides about them.
const slabReturns = false

func returnPages([]byte) error { return nil }
