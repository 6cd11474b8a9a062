package uring

// This file is the whole io_uring ABI this package speaks: structs, opcodes
// and flags, transcribed from the kernel's include/uapi/linux/io_uring.h.
// It has no build tag on purpose. It is plain data, and compiling it on every
// OS keeps SQE, CQE and the flag types present everywhere, so packages that
// mention them need no build tags (see ring_other.go for the stubbed
// operations). Every struct starts with structs.HostLayout so the compiler
// keeps C layout, and abi_test.go checks each size against the kernel's.

import (
	"strconv"
	"strings"
	"structs"
)

// SQE is a submission queue entry, struct io_uring_sqe (64 bytes).
//
// An SQE returned by [Ring.GetSQE] points into memory shared with the kernel.
// It belongs to the ring's owner thread until the next submit, after which the
// kernel may read it at any time, so it must not be kept. Fields that are
// unions in C carry the name of their most common member; the Prep methods in
// ops.go fill them for each opcode.
type SQE struct {
	_           structs.HostLayout
	Opcode      Op       // IORING_OP_*
	Flags       SQEFlags // IOSQE_*
	Ioprio      uint16   // ioprio, or op flags: RecvFlags, AcceptFlags
	Fd          int32    // file descriptor, or fixed-file index with SQEFixedFile
	Off         uint64   // file offset; addr2; timeout count; accept addrlen pointer
	Addr        uint64   // buffer, iovec, msghdr, timespec address; cancel key
	Len         uint32   // buffer length, iovec count, poll flags
	OpFlags     uint32   // rw_flags, msg_flags, poll32_events, timeout_flags, accept_flags, cancel_flags
	UserData    uint64   // returned untouched in the CQE; a token, never a Go pointer
	BufIndex    uint16   // fixed buffer index, or buffer group with SQEBufferSelect
	Personality uint16   // registered credentials
	FileIndex   int32    // splice_fd_in, file_index, addr_len
	Addr3       uint64   // addr3
	_           uint64   // __pad2[0]
}

// CQE is a completion queue entry, struct io_uring_cqe (16 bytes).
//
// A CQE returned by [Ring.PeekCQE] points into the mapped completion ring; it
// is valid until the matching [Ring.CQAdvance]. Copy it to keep it.
type CQE struct {
	_        structs.HostLayout
	UserData uint64   // the SQE's UserData
	Res      int32    // result, or a negated errno
	Flags    CQEFlags // IORING_CQE_F_*; the upper 16 bits carry a buffer ID
}

// Timespec is struct __kernel_timespec: 64-bit seconds and nanoseconds on
// every architecture, unlike unix.Timespec.
type Timespec struct {
	_    structs.HostLayout
	Sec  int64
	Nsec int64
}

// Op is an io_uring opcode (enum io_uring_op). The comment on each names the
// kernel release that added it.
type Op uint8

// Opcodes, in kernel order.
const (
	OpNop            Op = iota // 5.1
	OpReadv                    // 5.1
	OpWritev                   // 5.1
	OpFsync                    // 5.1
	OpReadFixed                // 5.1
	OpWriteFixed               // 5.1
	OpPollAdd                  // 5.1; multishot 5.13
	OpPollRemove               // 5.1
	OpSyncFileRange            // 5.2
	OpSendmsg                  // 5.3
	OpRecvmsg                  // 5.3
	OpTimeout                  // 5.4
	OpTimeoutRemove            // 5.5
	OpAccept                   // 5.5; multishot 5.19
	OpAsyncCancel              // 5.5; by fd and ALL/ANY 5.19
	OpLinkTimeout              // 5.5
	OpConnect                  // 5.5
	OpFallocate                // 5.6
	OpOpenat                   // 5.6
	OpClose                    // 5.6
	OpFilesUpdate              // 5.6
	OpStatx                    // 5.6
	OpRead                     // 5.6
	OpWrite                    // 5.6
	OpFadvise                  // 5.6
	OpMadvise                  // 5.6
	OpSend                     // 5.6
	OpRecv                     // 5.6; multishot 6.0
	OpOpenat2                  // 5.6
	OpEpollCtl                 // 5.6
	OpSplice                   // 5.7
	OpProvideBuffers           // 5.7
	OpRemoveBuffers            // 5.7
	OpTee                      // 5.8
	OpShutdown                 // 5.11
	OpRenameat                 // 5.11
	OpUnlinkat                 // 5.11
	OpMkdirat                  // 5.15
	OpSymlinkat                // 5.15
	OpLinkat                   // 5.15
	OpMsgRing                  // 5.18
	OpFsetxattr                // 5.19
	OpSetxattr                 // 5.19
	OpFgetxattr                // 5.19
	OpGetxattr                 // 5.19
	OpSocket                   // 5.19
	OpUringCmd                 // 5.19
	OpSendZC                   // 6.0
	OpSendmsgZC                // 6.1
	OpReadMultishot            // 6.7
	OpWaitid                   // 6.7
	OpFutexWait                // 6.7
	OpFutexWake                // 6.7
	OpFutexWaitv               // 6.7
	OpFixedFdInstall           // 6.8
	OpFtruncate                // 6.9
	OpBind                     // 6.11
	OpListen                   // 6.11
	OpRecvZC                   // 6.15
	OpEpollWait                // 6.15
	OpReadvFixed               // 6.15
	OpWritevFixed              // 6.15
	OpPipe                     // 6.16
)

var opNames = [...]string{
	"NOP", "READV", "WRITEV", "FSYNC", "READ_FIXED", "WRITE_FIXED", "POLL_ADD",
	"POLL_REMOVE", "SYNC_FILE_RANGE", "SENDMSG", "RECVMSG", "TIMEOUT",
	"TIMEOUT_REMOVE", "ACCEPT", "ASYNC_CANCEL", "LINK_TIMEOUT", "CONNECT",
	"FALLOCATE", "OPENAT", "CLOSE", "FILES_UPDATE", "STATX", "READ", "WRITE",
	"FADVISE", "MADVISE", "SEND", "RECV", "OPENAT2", "EPOLL_CTL", "SPLICE",
	"PROVIDE_BUFFERS", "REMOVE_BUFFERS", "TEE", "SHUTDOWN", "RENAMEAT",
	"UNLINKAT", "MKDIRAT", "SYMLINKAT", "LINKAT", "MSG_RING", "FSETXATTR",
	"SETXATTR", "FGETXATTR", "GETXATTR", "SOCKET", "URING_CMD", "SEND_ZC",
	"SENDMSG_ZC", "READ_MULTISHOT", "WAITID", "FUTEX_WAIT", "FUTEX_WAKE",
	"FUTEX_WAITV", "FIXED_FD_INSTALL", "FTRUNCATE", "BIND", "LISTEN", "RECV_ZC",
	"EPOLL_WAIT", "READV_FIXED", "WRITEV_FIXED", "PIPE",
}

// String returns the kernel's name without the IORING_OP_ prefix.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "OP(" + strconv.Itoa(int(o)) + ")"
}

// SQEFlags are the IOSQE_* flags of an SQE.
type SQEFlags uint8

// SQE flags.
const (
	SQEFixedFile      SQEFlags = 1 << 0 // Fd is an index into the registered files (5.1)
	SQEIODrain        SQEFlags = 1 << 1 // issue after all earlier SQEs complete (5.2)
	SQEIOLink         SQEFlags = 1 << 2 // the next SQE starts when this one succeeds (5.3)
	SQEIOHardlink     SQEFlags = 1 << 3 // like SQEIOLink, but not broken by failure (5.5)
	SQEAsync          SQEFlags = 1 << 4 // always punt to a kernel worker (5.6)
	SQEBufferSelect   SQEFlags = 1 << 5 // pick a buffer from group BufIndex (5.7)
	SQECQESkipSuccess SQEFlags = 1 << 6 // no CQE on success (5.17); breaks InFlight accounting
)

// CQEFlags are the IORING_CQE_F_* flags of a CQE.
type CQEFlags uint32

// CQE flags.
const (
	CQEFBuffer       CQEFlags = 1 << 0 // upper 16 bits hold the provided buffer ID (5.7)
	CQEFMore         CQEFlags = 1 << 1 // the SQE will post more CQEs: multishot (5.13)
	CQEFSockNonempty CQEFlags = 1 << 2 // more data is queued on the socket (5.19)
	CQEFNotif        CQEFlags = 1 << 3 // zero-copy send notification (6.0)
	CQEFBufMore      CQEFlags = 1 << 4 // incrementally consumed buffer not done (6.12)

	// CQEBufferShift is IORING_CQE_BUFFER_SHIFT: the buffer ID is Flags>>16.
	CQEBufferShift = 16
)

// SetupFlags are the IORING_SETUP_* flags given to io_uring_setup(2).
type SetupFlags uint32

// Setup flags. The comment on each names the kernel release that added it.
const (
	SetupIOPoll        SetupFlags = 1 << 0  // busy-poll for completions (5.1)
	SetupSQPoll        SetupFlags = 1 << 1  // kernel thread polls the SQ (5.1)
	SetupSQAff         SetupFlags = 1 << 2  // pin the SQ thread (5.1)
	SetupCQSize        SetupFlags = 1 << 3  // the CQ size is given (5.5)
	SetupClamp         SetupFlags = 1 << 4  // clamp sizes to the maximum (5.6)
	SetupAttachWQ      SetupFlags = 1 << 5  // share another ring's workers (5.6)
	SetupRDisabled     SetupFlags = 1 << 6  // start disabled (5.10)
	SetupSubmitAll     SetupFlags = 1 << 7  // keep submitting past a failed SQE (5.18)
	SetupCoopTaskrun   SetupFlags = 1 << 8  // no IPI to run completion work (5.19)
	SetupTaskrunFlag   SetupFlags = 1 << 9  // flag pending completion work in the SQ ring (5.19)
	SetupSQE128        SetupFlags = 1 << 10 // 128-byte SQEs (5.19)
	SetupCQE32         SetupFlags = 1 << 11 // 32-byte CQEs (5.19)
	SetupSingleIssuer  SetupFlags = 1 << 12 // only the creating thread submits (6.0)
	SetupDeferTaskrun  SetupFlags = 1 << 13 // run completion work only on enter (6.1)
	SetupNoMmap        SetupFlags = 1 << 14 // application provides ring memory (6.5)
	SetupRegisteredFd  SetupFlags = 1 << 15 // return a registered ring index (6.5)
	SetupNoSQArray     SetupFlags = 1 << 16 // no SQ index array (6.6)
	SetupHybridIOPoll  SetupFlags = 1 << 17 // hybrid polling (6.13)
	setupFlagsKnownLen            = 18
)

// DefaultFlags are the setup flags [New] asks for when Config.Flags is zero:
// the single-issuer, deferred task-work configuration the io_uring worker is
// designed around. New drops them one at a time on EINVAL (see [New]).
const DefaultFlags = SetupSubmitAll | SetupCoopTaskrun | SetupTaskrunFlag |
	SetupSingleIssuer | SetupDeferTaskrun

var setupFlagNames = [setupFlagsKnownLen]string{
	"IOPOLL", "SQPOLL", "SQ_AFF", "CQSIZE", "CLAMP", "ATTACH_WQ", "R_DISABLED",
	"SUBMIT_ALL", "COOP_TASKRUN", "TASKRUN_FLAG", "SQE128", "CQE32",
	"SINGLE_ISSUER", "DEFER_TASKRUN", "NO_MMAP", "REGISTERED_FD_ONLY",
	"NO_SQARRAY", "HYBRID_IOPOLL",
}

// String lists the flags by kernel name, joined by "|", or "0".
func (f SetupFlags) String() string { return flagString(uint64(f), setupFlagNames[:]) }

// Features are the IORING_FEAT_* bits the kernel reports at setup.
type Features uint32

// Feature bits. The comment on each names the kernel release that added it.
const (
	FeatSingleMmap     Features = 1 << 0  // SQ and CQ rings share one mapping (5.4)
	FeatNoDrop         Features = 1 << 1  // overflowed CQEs are kept, not dropped (5.5)
	FeatSubmitStable   Features = 1 << 2  // SQE data is consumed at submit (5.5)
	FeatRWCurPos       Features = 1 << 3  // offset -1 means the file position (5.6)
	FeatCurPersonality Features = 1 << 4  // (5.6)
	FeatFastPoll       Features = 1 << 5  // internal poll instead of a worker thread (5.7)
	FeatPoll32Bits     Features = 1 << 6  // (5.9)
	FeatSQPollNonfixed Features = 1 << 7  // (5.11)
	FeatExtArg         Features = 1 << 8  // enter takes a timeout argument (5.11)
	FeatNativeWorkers  Features = 1 << 9  // (5.12)
	FeatRsrcTags       Features = 1 << 10 // (5.13)
	FeatCQESkip        Features = 1 << 11 // (5.17)
	FeatLinkedFile     Features = 1 << 12 // (5.17)
	FeatRegRegRing     Features = 1 << 13 // (6.3)
	FeatRecvsendBundle Features = 1 << 14 // bundled send/recv (6.10)
	FeatMinTimeout     Features = 1 << 15 // min_wait_usec in enter (6.12)
	FeatRWAttr         Features = 1 << 16 // (6.14)
	FeatNoIOWait       Features = 1 << 17 // (6.15)
	featKnownLen                = 18
)

var featureNames = [featKnownLen]string{
	"SINGLE_MMAP", "NODROP", "SUBMIT_STABLE", "RW_CUR_POS", "CUR_PERSONALITY",
	"FAST_POLL", "POLL_32BITS", "SQPOLL_NONFIXED", "EXT_ARG", "NATIVE_WORKERS",
	"RSRC_TAGS", "CQE_SKIP", "LINKED_FILE", "REG_REG_RING", "RECVSEND_BUNDLE",
	"MIN_TIMEOUT", "RW_ATTR", "NO_IOWAIT",
}

// String lists the features by kernel name, joined by "|", or "0".
func (f Features) String() string { return flagString(uint64(f), featureNames[:]) }

func flagString(v uint64, names []string) string {
	if v == 0 {
		return "0"
	}
	var b strings.Builder
	for i := 0; v != 0 && i < 64; i++ {
		bit := uint64(1) << i
		if v&bit == 0 {
			continue
		}
		v &^= bit
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		if i < len(names) {
			b.WriteString(names[i])
		} else {
			b.WriteString("0x")
			b.WriteString(strconv.FormatUint(bit, 16))
		}
	}
	return b.String()
}

// RecvFlags go in SQE.Ioprio for RECV, RECVMSG, SEND and SENDMSG.
type RecvFlags uint16

// Receive flags.
const (
	// RecvPollFirst arms poll before trying the receive (5.19). Use it when
	// the socket is expected to be empty, so no buffer is pinned in vain.
	RecvPollFirst RecvFlags = 1 << 0
	// RecvMultishot keeps the receive armed, posting a CQE with CQEFMore per
	// completion (6.0). It requires SQEBufferSelect.
	RecvMultishot RecvFlags = 1 << 1
)

// AcceptFlags go in SQE.Ioprio for ACCEPT.
const (
	acceptMultishot uint16 = 1 << 0 // IORING_ACCEPT_MULTISHOT (5.19)
)

// PollFlags go in SQE.Len for POLL_ADD.
const (
	pollAddMulti uint32 = 1 << 0 // IORING_POLL_ADD_MULTI (5.13)
)

// TimeoutFlags go in SQE.OpFlags for TIMEOUT and LINK_TIMEOUT.
type TimeoutFlags uint32

// Timeout flags.
const (
	TimeoutAbs          TimeoutFlags = 1 << 0 // absolute time (5.5)
	TimeoutBoottime     TimeoutFlags = 1 << 2 // CLOCK_BOOTTIME (5.15)
	TimeoutRealtime     TimeoutFlags = 1 << 3 // CLOCK_REALTIME (5.15)
	TimeoutETimeSuccess TimeoutFlags = 1 << 5 // expiry is a success: -ETIME posts no link failure (5.16)
	TimeoutMultishot    TimeoutFlags = 1 << 6 // repeat (6.4)
)

// CancelFlags go in SQE.OpFlags for ASYNC_CANCEL.
type CancelFlags uint32

// Cancel flags (5.19, except where noted).
const (
	CancelAll      CancelFlags = 1 << 0 // cancel every match, not just the first
	CancelFd       CancelFlags = 1 << 1 // match on SQE.Fd instead of user_data
	CancelAny      CancelFlags = 1 << 2 // match every request
	CancelFdFixed  CancelFlags = 1 << 3 // the fd is a fixed-file index
	CancelUserData CancelFlags = 1 << 4 // match on user_data as well (6.6)
	CancelOp       CancelFlags = 1 << 5 // match on opcode (6.6)
)

// Constants not exported because only this package's machinery uses them.
const (
	// mmap offsets (IORING_OFF_*).
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	// sq_ring->flags (IORING_SQ_*).
	sqCQOverflow = 1 << 1
	sqTaskrun    = 1 << 2

	// io_uring_enter(2) flags (IORING_ENTER_*).
	enterGetEvents = 1 << 0
	enterExtArg    = 1 << 3

	// io_uring_register(2) opcodes (IORING_REGISTER_*).
	registerBuffers     = 0
	unregisterBuffers   = 1
	registerFiles       = 2
	unregisterFiles     = 3
	registerFilesUpdate = 6
	registerProbe       = 8
	registerFiles2      = 13
	registerPbufRing    = 22
	unregisterPbufRing  = 23

	// io_uring_rsrc_register.flags.
	rsrcRegisterSparse = 1 << 0

	// io_uring_probe_op.flags.
	probeOpSupported = 1 << 0

	// Kernel limits.
	maxSQEntries  = 32768     // IORING_MAX_ENTRIES
	maxCQEntries  = 2 * 32768 // IORING_MAX_CQ_ENTRIES
	maxBufRingLen = 32768     // entries in one provided buffer ring

	// _NSIG / 8: the sigset size enter expects.
	nsigBytes = 8
)

// sqringOffsets is struct io_sqring_offsets.
type sqringOffsets struct {
	_           structs.HostLayout
	head        uint32
	tail        uint32
	ringMask    uint32
	ringEntries uint32
	flags       uint32
	dropped     uint32
	array       uint32
	resv1       uint32
	userAddr    uint64
}

// cqringOffsets is struct io_cqring_offsets.
type cqringOffsets struct {
	_           structs.HostLayout
	head        uint32
	tail        uint32
	ringMask    uint32
	ringEntries uint32
	overflow    uint32
	cqes        uint32
	flags       uint32
	resv1       uint32
	userAddr    uint64
}

// params is struct io_uring_params (120 bytes).
type params struct {
	_            structs.HostLayout
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        sqringOffsets
	cqOff        cqringOffsets
}

// probeOp is struct io_uring_probe_op.
type probeOp struct {
	_     structs.HostLayout
	op    uint8
	resv  uint8
	flags uint16
	resv2 uint32
}

// probeHeader is struct io_uring_probe without its flexible ops array;
// probeBuf appends room for every possible opcode.
type probeHeader struct {
	_      structs.HostLayout
	lastOp uint8
	opsLen uint8
	resv   uint16
	resv2  [3]uint32
}

type probeBuf struct {
	_   structs.HostLayout
	hdr probeHeader
	ops [256]probeOp
}

// bufRingEntry is struct io_uring_buf. Entry 0's last field doubles as the
// ring's tail (struct io_uring_buf_ring overlays it).
type bufRingEntry struct {
	_    structs.HostLayout
	addr uint64
	len  uint32
	bid  uint16
	resv uint16
}

// bufRingTailOffset is where the u16 tail of struct io_uring_buf_ring lives:
// in entry 0's resv field.
const bufRingTailOffset = 14

// bufReg is struct io_uring_buf_reg, the IORING_REGISTER_PBUF_RING argument.
type bufReg struct {
	_           structs.HostLayout
	ringAddr    uint64
	ringEntries uint32
	bgid        uint16
	flags       uint16
	resv        [3]uint64
}

// rsrcRegister is struct io_uring_rsrc_register, the IORING_REGISTER_FILES2
// argument.
type rsrcRegister struct {
	_     structs.HostLayout
	nr    uint32
	flags uint32
	resv2 uint64
	data  uint64
	tags  uint64
}

// filesUpdate is struct io_uring_files_update, the
// IORING_REGISTER_FILES_UPDATE argument.
type filesUpdate struct {
	_      structs.HostLayout
	offset uint32
	resv   uint32
	fds    uint64 // __s32 *
}

// getEventsArg is struct io_uring_getevents_arg, the IORING_ENTER_EXT_ARG
// argument. minWaitUsec was a pad before 6.12 (IORING_FEAT_MIN_TIMEOUT).
type getEventsArg struct {
	_           structs.HostLayout
	sigmask     uint64
	sigmaskSz   uint32
	minWaitUsec uint32
	ts          uint64
}
