//go:build !linux

package uring

import (
	"time"

	"golang.org/x/sys/unix"
)

// This file gives every exported name of the Linux implementation a stub, so
// callers build everywhere and learn at run time that io_uring is missing.

var errNotLinux = &NotSupportedError{Op: "setup", Reason: "io_uring needs Linux"}

// Ring is an io_uring instance. On this OS it cannot be created.
type Ring struct{}

// New returns an error matching ErrNotSupported on this OS.
func New(cfg Config) (*Ring, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

func (r *Ring) Fd() int                                                     { return -1 }
func (r *Ring) Flags() SetupFlags                                           { return 0 }
func (r *Ring) Features() Features                                          { return 0 }
func (r *Ring) SQEntries() uint32                                           { return 0 }
func (r *Ring) CQEntries() uint32                                           { return 0 }
func (r *Ring) InFlight() int                                               { return 0 }
func (r *Ring) Overflow() uint32                                            { return 0 }
func (r *Ring) GetSQE() *SQE                                                { return nil }
func (r *Ring) NextSQE() (*SQE, error)                                      { return nil, errNotLinux }
func (r *Ring) Submit() (int, error)                                        { return 0, errNotLinux }
func (r *Ring) SubmitAndWait(n uint32) (int, error)                         { return 0, errNotLinux }
func (r *Ring) SubmitAndWaitTimeout(n uint32, d time.Duration) (int, error) { return 0, errNotLinux }
func (r *Ring) CQReady() uint32                                             { return 0 }
func (r *Ring) PeekCQE() (*CQE, bool)                                       { return nil, false }
func (r *Ring) CQAdvance(n uint32)                                          {}
func (r *Ring) ForEachCQE(fn func(*CQE)) int                                { return 0 }
func (r *Ring) Close() error                                                { return nil }
func (r *Ring) RegisterBuffers(iovs []unix.Iovec) error                     { return errNotLinux }
func (r *Ring) UnregisterBuffers() error                                    { return errNotLinux }
func (r *Ring) RegisterFiles(fds []int32) error                             { return errNotLinux }
func (r *Ring) UnregisterFiles() error                                      { return errNotLinux }
func (r *Ring) RegisterBufRing(entries uint32, group uint16) (*BufRing, error) {
	return nil, errNotLinux
}
func (r *Ring) UnregisterBufRing(b *BufRing) error { return errNotLinux }

// BufRing is a provided-buffer ring. On this OS it cannot be created.
type BufRing struct{}

func (b *BufRing) Group() uint16              { return 0 }
func (b *BufRing) Entries() uint32            { return 0 }
func (b *BufRing) Add(buf []byte, bid uint16) {}
func (b *BufRing) Commit()                    {}

// Waker wakes a ring's owner thread. On this OS it cannot be created.
type Waker struct{}

// NewWaker returns an error matching ErrNotSupported on this OS.
func NewWaker() (*Waker, error) { return nil, errNotLinux }

func (w *Waker) Fd() int       { return -1 }
func (w *Waker) Wake() error   { return errNotLinux }
func (w *Waker) Arm(s *SQE)    {}
func (w *Waker) Count() uint64 { return 0 }
func (w *Waker) Close() error  { return nil }

// Arena is off-heap memory for the kernel. On this OS it cannot be created.
type Arena struct{}

// NewArena returns an error matching ErrNotSupported on this OS.
func NewArena(size int) (*Arena, error) { return nil, errNotLinux }

func (a *Arena) Alloc(n, align int) ([]byte, error) { return nil, errNotLinux }
func (a *Arena) Reset()                             {}
func (a *Arena) Len() int                           { return 0 }
func (a *Arena) Close() error                       { return nil }

// ArenaAlloc returns an error matching ErrNotSupported on this OS.
func ArenaAlloc[T any](a *Arena) (*T, error) { return nil, errNotLinux }

// SupportedOps returns an error matching ErrNotSupported on this OS.
func (r *Ring) SupportedOps() (OpSet, error) { return OpSet{}, errNotLinux }
