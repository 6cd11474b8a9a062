package pool

import (
	"fmt"
	"math/bits"
	"time"
)

// Limits on a pool's shape.
const (
	// MinBufSize is the smallest buffer: one page.
	MinBufSize = 4 << 10
	// MaxBufSize is the largest buffer: the largest power of two that one
	// read or receive can fill, since Linux moves at most 2 GiB less a
	// page in one.
	MaxBufSize = 1 << 30
	// MaxBuffers is the most buffers a pool may have: io_uring's limit on
	// registered buffers, so that the slab Iovecs describes is one the
	// kernel will register for a caller that wants to. sluice's runners
	// read into the buffers without registering them
	// (docs/decisions/0020-no-fixed-buffers.md).
	MaxBuffers = 1 << 14
	// DefaultMaxBytes caps the slab when Config.MaxBytes is zero.
	DefaultMaxBytes = 4 << 30
)

// ConfigError reports a bad Config field.
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("pool: config: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Config is the shape of a pool. BufSize and Buffers have no defaults: a
// zero is an error, because the right size depends on the workload.
type Config struct {
	// BufSize is the size of each buffer in bytes: a power of two, at
	// least MinBufSize and at most MaxBufSize.
	BufSize int `yaml:"buf_size"`
	// Buffers is the number of buffers, from 1 to MaxBuffers.
	Buffers int `yaml:"buffers"`
	// MaxPerSource caps the buffers one source may hold, waiting or not.
	// Zero means max(1, Buffers/4).
	MaxPerSource int `yaml:"max_per_source"`
	// MaxBytes caps Buffers*BufSize. Zero means DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// Prefault touches every page of the slab when it is mapped
	// (MAP_POPULATE), so that no read ever waits for the kernel to fault
	// a page in, at the price of holding the whole slab resident from
	// New on. Without it, a page becomes resident when it is first
	// written, and an idle pool costs next to nothing; a page once
	// touched stays resident until its buffer has stayed free for
	// ReturnAfter. Only Linux maps the slab; other systems ignore it.
	Prefault bool `yaml:"prefault"`
	// ReturnAfter gives the pages of a buffer that has stayed free this
	// long back to the kernel (madvise MADV_DONTNEED), so that a pool
	// that took traffic in a burst shrinks back to what its traffic keeps
	// using, as Go's heap does; a buffer lent out again is faulted in
	// afresh, zeroed. Buffers go back between ReturnAfter and twice it
	// after their release, the least recently used first. Zero means
	// DefaultReturnAfter; negative keeps every page, as does Prefault.
	// Only Linux returns pages.
	ReturnAfter time.Duration `yaml:"return_after"`
}

// Validate checks c and returns it with defaults filled in. New calls it;
// it is exported so that owners of a Config can check it early.
func (c Config) Validate() (Config, error) {
	if c.BufSize < MinBufSize || c.BufSize > MaxBufSize || bits.OnesCount(uint(c.BufSize)) != 1 {
		return c, &ConfigError{"BufSize", c.BufSize,
			fmt.Sprintf("must be a power of two from %d to %d", MinBufSize, MaxBufSize)}
	}
	if c.Buffers < 1 || c.Buffers > MaxBuffers {
		return c, &ConfigError{"Buffers", c.Buffers, fmt.Sprintf("must be from 1 to %d", MaxBuffers)}
	}
	if c.MaxBytes < 0 {
		return c, &ConfigError{"MaxBytes", c.MaxBytes, "must not be negative"}
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if total := int64(c.Buffers) * int64(c.BufSize); total > c.MaxBytes {
		return c, &ConfigError{"Buffers", c.Buffers,
			fmt.Sprintf("Buffers*BufSize = %d bytes exceeds MaxBytes %d", total, c.MaxBytes)}
	}
	if c.MaxPerSource < 0 || c.MaxPerSource > c.Buffers {
		return c, &ConfigError{"MaxPerSource", c.MaxPerSource, fmt.Sprintf("must be from 0 to Buffers (%d)", c.Buffers)}
	}
	if c.MaxPerSource == 0 {
		c.MaxPerSource = max(1, c.Buffers/4)
	}
	if c.ReturnAfter == 0 {
		c.ReturnAfter = DefaultReturnAfter
	}
	return c, nil
}

// SourceID names the source an account belongs to. The pool attaches no
// meaning to it beyond accounting.
type SourceID uint64
