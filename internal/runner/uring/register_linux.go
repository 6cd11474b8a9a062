package uring

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// register wraps io_uring_register for the owner thread. The kernel reads
// arg during the call only, so it may live on the Go heap.
func (r *Ring) register(op uint32, arg unsafe.Pointer, nr uint32) (int, error) {
	if r.fd < 0 {
		return 0, ErrClosed
	}
	n, err := sysRegister(r.fd, op, arg, nr)
	if err == unix.EEXIST && unix.Gettid() != r.tid {
		return n, ErrWrongThread
	}
	return n, err
}

// RegisterBuffers registers memory for READ_FIXED (5.1): SQE.BufIndex then
// names iovs[i], and the kernel skips pinning pages on every read. The
// memory must stay mapped until the ring is closed or [Ring.UnregisterBuffers]
// returns; anonymous mmap'd memory (the pool's slab) is the intended use.
//
// Registered pages count against RLIMIT_MEMLOCK unless the process has
// CAP_IPC_LOCK. When the kernel refuses for lack of it, the error is a
// *[MemlockError], and the caller should fall back to plain READ.
func (r *Ring) RegisterBuffers(iovs []unix.Iovec) error {
	if len(iovs) == 0 {
		return fmt.Errorf("ring: register buffers: no buffers")
	}
	_, err := r.register(registerBuffers, unsafe.Pointer(&iovs[0]), uint32(len(iovs)))
	switch {
	case err == nil:
		return nil
	case err == unix.ENOMEM:
		var total int64
		for _, iov := range iovs {
			total += int64(iov.Len)
		}
		return &MemlockError{Op: "register buffers", Bytes: total, Limit: memlockLimit(), Err: err}
	case err == ErrWrongThread || err == ErrClosed:
		return err
	}
	return fmt.Errorf("ring: register buffers: %w", err)
}

// UnregisterBuffers drops the registered buffers. Reads using them must have
// completed.
func (r *Ring) UnregisterBuffers() error {
	if _, err := r.register(unregisterBuffers, nil, 0); err != nil {
		return wrapRegister("unregister buffers", err)
	}
	return nil
}

// RegisterFiles registers descriptors (5.1) so SQEs with SQEFixedFile can
// name them by index, saving a file-table lookup per operation. -1 leaves a
// slot empty.
func (r *Ring) RegisterFiles(fds []int32) error {
	if len(fds) == 0 {
		return fmt.Errorf("ring: register files: no files")
	}
	if _, err := r.register(registerFiles, unsafe.Pointer(&fds[0]), uint32(len(fds))); err != nil {
		return wrapRegister("register files", err)
	}
	return nil
}

// RegisterFilesSparse registers a table of n empty file slots (5.19), for
// UpdateFiles to fill. The kernel refuses more slots than the soft
// RLIMIT_NOFILE allows (EMFILE) and keeps about 8 bytes per slot. A file
// in the table is reached with SQEFixedFile and its slot number, and
// counts against no descriptor limit: the process may close its own
// descriptor once the table holds the file.
func (r *Ring) RegisterFilesSparse(n uint32) error {
	if n == 0 {
		return fmt.Errorf("ring: register files: no slots")
	}
	reg := rsrcRegister{nr: n, flags: rsrcRegisterSparse}
	if _, err := r.register(registerFiles2, unsafe.Pointer(&reg), uint32(unsafe.Sizeof(reg))); err != nil {
		return wrapRegister("register sparse files", err)
	}
	return nil
}

// UpdateFiles sets the registered files' slots from off on to fds (5.5):
// the table takes its own reference to each file, and -1 empties a slot
// (its file is released once the requests using it complete). It returns
// how many slots it set.
func (r *Ring) UpdateFiles(off uint32, fds []int32) (int, error) {
	if len(fds) == 0 {
		return 0, nil
	}
	up := filesUpdate{offset: off, fds: uint64(uintptr(unsafe.Pointer(&fds[0])))}
	n, err := r.register(registerFilesUpdate, unsafe.Pointer(&up), uint32(len(fds)))
	runtime.KeepAlive(fds)
	if err != nil {
		return n, wrapRegister("update files", err)
	}
	return n, nil
}

// UnregisterFiles drops the registered descriptors.
func (r *Ring) UnregisterFiles() error {
	if _, err := r.register(unregisterFiles, nil, 0); err != nil {
		return wrapRegister("unregister files", err)
	}
	return nil
}

func wrapRegister(op string, err error) error {
	if err == ErrWrongThread || err == ErrClosed {
		return err
	}
	return fmt.Errorf("ring: %s: %w", op, err)
}

func memlockLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0
	}
	return rl.Cur
}

// BufRing is a provided-buffer ring (IORING_REGISTER_PBUF_RING, 5.19): a
// group of buffers that receive operations with SQEBufferSelect pick from,
// such as [SQE.PrepRecvMultishot]. The ring of buffer descriptors lives in
// its own anonymous mapping; the buffers themselves belong to the caller and
// must stay valid while they are in the ring.
//
// A BufRing is not safe for concurrent use; it belongs to its Ring's owner
// thread. The kernel does not say which buffers are still free, so the
// caller keeps count: give a buffer back with Add and Commit once the CQE
// that carried its ID has been handled.
type BufRing struct {
	mem     []byte
	bufs    []bufRingEntry
	tail    *atomic.Uint32 // the 32-bit word holding bufs[0].bid and the u16 tail
	mask    uint32
	group   uint16
	local   uint16 // tail as last published
	staged  uint16 // entries added since
	entries uint32
}

// RegisterBufRing creates and registers a provided-buffer ring of entries
// slots (a power of two, at most 32768) as buffer group group. Fill it with
// Add and Commit. The ring unmaps it on Close, or earlier through
// [Ring.UnregisterBufRing].
func (r *Ring) RegisterBufRing(entries uint32, group uint16) (*BufRing, error) {
	if entries == 0 || entries > maxBufRingLen || entries&(entries-1) != 0 {
		return nil, fmt.Errorf("ring: register buffer ring: entries %d is not a power of two in [1, %d]", entries, maxBufRingLen)
	}
	if r.fd < 0 {
		return nil, ErrClosed
	}
	size := int(entries) * int(unsafe.Sizeof(bufRingEntry{}))
	size = (size + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ring: register buffer ring: mmap: %w", err)
	}
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), ringEntries: entries, bgid: group}
	if _, err := r.register(registerPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		unix.Munmap(mem)
		if err == unix.EINVAL {
			return nil, &NotSupportedError{Op: "register buffer ring", Reason: "provided buffer rings need 5.19", Err: err}
		}
		return nil, wrapRegister("register buffer ring", err)
	}
	b := &BufRing{
		mem:     mem,
		bufs:    unsafe.Slice((*bufRingEntry)(unsafe.Pointer(&mem[0])), entries),
		tail:    (*atomic.Uint32)(unsafe.Pointer(&mem[bufRingTailOffset-2])),
		mask:    entries - 1,
		group:   group,
		entries: entries,
	}
	r.bufRings = append(r.bufRings, b)
	return b, nil
}

// UnregisterBufRing removes b's group from the kernel and unmaps it. No
// operation may be using the group.
func (r *Ring) UnregisterBufRing(b *BufRing) error {
	i := slices.Index(r.bufRings, b)
	if i < 0 {
		return fmt.Errorf("ring: unregister buffer ring: group %d is not registered on this ring", b.group)
	}
	reg := bufReg{bgid: b.group}
	if _, err := r.register(unregisterPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		return wrapRegister("unregister buffer ring", err)
	}
	r.bufRings = slices.Delete(r.bufRings, i, i+1)
	b.unmap()
	return nil
}

func (b *BufRing) unmap() {
	if b.mem != nil {
		unix.Munmap(b.mem)
		b.mem, b.bufs, b.tail = nil, nil, nil
	}
}

// Group returns the buffer group ID to put in SQEs.
func (b *BufRing) Group() uint16 { return b.group }

// Entries returns the number of slots.
func (b *BufRing) Entries() uint32 { return b.entries }

// Add stages buf under buffer ID bid; the kernel sees it after Commit. Never
// have more than Entries buffers in the ring at once. It mirrors liburing
// io_uring_buf_ring_add.
func (b *BufRing) Add(buf []byte, bid uint16) {
	e := &b.bufs[uint32(b.local+b.staged)&b.mask]
	// Leave e.resv alone: in slot 0 it is the ring's tail.
	e.addr = bufAddr(buf)
	e.len = uint32(len(buf))
	e.bid = bid
	b.staged++
}

// Commit publishes the staged buffers with a store-release of the tail, as
// liburing io_uring_buf_ring_advance does. Go has no 16-bit atomics, so it
// stores the 32-bit word that also holds slot 0's buffer ID, rewriting that
// ID with the value it already has; only this thread writes either half.
func (b *BufRing) Commit() {
	if b.staged == 0 {
		return
	}
	b.local += b.staged
	b.staged = 0
	lo, hi := uint32(b.bufs[0].bid), uint32(b.local) // bid at offset 12, tail at 14
	if bigEndian() {
		lo, hi = hi, lo
	}
	b.tail.Store(hi<<16 | lo)
}
