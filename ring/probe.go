package ring

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-io/sluice/internal/runner/uring"
)

// ErrNotSupported means io_uring cannot be used here: not Linux, a kernel
// too old for a feature, io_uring disabled by sysctl, or blocked by a
// seccomp filter. The errors of [Probe] and [NewRunner] wrap it with the
// reason. It matches errors.ErrUnsupported, like every "not supported"
// error in sluice, so a caller can treat them alike without knowing this
// package.
var ErrNotSupported = uring.ErrNotSupported

// KernelVersion is the running kernel's release, from uname(2).
type KernelVersion struct {
	Major, Minor, Patch int
	Release             string // the full release string, such as "6.18.4-arch1"
}

// AtLeast reports whether the kernel is major.minor or newer.
func (v KernelVersion) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

func (v KernelVersion) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// parseKernelVersion reads "6.18.44-fc" as 6, 18, 44.
func parseKernelVersion(release string) KernelVersion {
	v := KernelVersion{Release: release}
	fields := strings.SplitN(release, ".", 3)
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i, f := range fields {
		end := strings.IndexFunc(f, func(r rune) bool { return r < '0' || r > '9' })
		if end >= 0 {
			f = f[:end]
		}
		*nums[i], _ = strconv.Atoi(f)
	}
	return v
}

// ProbeResult describes what io_uring can do on this machine. It is computed
// once per process by [Probe] and is read-only afterwards.
type ProbeResult struct {
	Kernel KernelVersion

	// Supported reports whether a ring can be created and the kernel has
	// every opcode the io_uring runner submits. If not, Reason says why, and
	// Err (if not nil) wraps ErrNotSupported or the failure behind it.
	Supported bool
	Reason    string
	Err       error

	// Flags are the setup flags granted to a ring that asked for
	// DefaultFlags, and Features the IORING_FEAT bits it reported.
	Flags    uring.SetupFlags
	Features uring.Features

	// MissingOps lists required opcodes the kernel lacks.
	MissingOps []uring.Op

	// Optional features. Where the kernel offers no direct probe, the
	// presence of an opcode or feature bit from the same release stands in,
	// which survives distribution backports better than a version check.
	MultishotAccept bool // 5.19, probed through IORING_OP_SOCKET
	MultishotRecv   bool // 6.0, probed through IORING_OP_SEND_ZC
	MultishotPoll   bool // 5.13, probed through IORING_FEAT_RSRC_TAGS
	CancelFd        bool // cancel by fd and ANY/ALL, 5.19, probed through IORING_OP_SOCKET
	BufRing         bool // provided buffer rings, 5.19, probed by registering one
	MsgRing         bool // IORING_OP_MSG_RING, 5.18
	MinWait         bool // IORING_FEAT_MIN_TIMEOUT, 6.12
	Bundles         bool // IORING_FEAT_RECVSEND_BUNDLE, 6.10

	// Locked-memory allowance for registered buffers: the soft and hard
	// RLIMIT_MEMLOCK (^uint64(0) is unlimited), and whether CAP_IPC_LOCK
	// lifts the limit.
	MemlockCur, MemlockMax uint64
	IPCLock                bool

	ops uring.OpSet
}

// requiredOps are the opcodes the io_uring runner submits, and so cannot do
// without: reads of files, pipes and the waker's eventfd, receives, the
// accepts of a listener's connections, the polls of sockets without data,
// and cancels. Files are read with plain READ into the lane's buffer
// (docs/decisions/0020-no-fixed-buffers.md), so READ_FIXED is not among
// them.
func requiredOps() []uring.Op {
	return []uring.Op{uring.OpRead, uring.OpRecv, uring.OpAccept, uring.OpPollAdd, uring.OpAsyncCancel}
}

// hasOp reports whether the kernel supports op (IORING_REGISTER_PROBE, 5.6).
func (p ProbeResult) hasOp(op uring.Op) bool { return p.ops.Has(op) }

// FitsMemlock reports whether registering bytes more of memory stays within
// the locked-memory limit. The limit is per user and shared by every ring,
// so this is an upper bound, not a promise.
func (p ProbeResult) FitsMemlock(bytes int64) bool {
	return p.IPCLock || p.MemlockCur == ^uint64(0) || bytes >= 0 && uint64(bytes) <= p.MemlockCur
}

// String describes the result over several lines, for start-up logs.
func (p ProbeResult) String() string {
	var b strings.Builder
	if p.Supported {
		b.WriteString("io_uring: supported\n")
	} else {
		fmt.Fprintf(&b, "io_uring: not supported: %s\n", p.Reason)
	}
	fmt.Fprintf(&b, "  kernel:          %s\n", p.Kernel.Release)
	if p.Flags != 0 || p.Features != 0 {
		fmt.Fprintf(&b, "  setup flags:     %v\n", p.Flags)
		fmt.Fprintf(&b, "  features:        %v\n", p.Features)
	}
	if len(p.MissingOps) > 0 {
		fmt.Fprintf(&b, "  missing ops:     %v\n", p.MissingOps)
	}
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(&b, "  multishot:       accept %s, recv %s, poll %s\n",
		yes(p.MultishotAccept), yes(p.MultishotRecv), yes(p.MultishotPoll))
	fmt.Fprintf(&b, "  cancel by fd:    %s\n", yes(p.CancelFd))
	fmt.Fprintf(&b, "  buffer rings:    %s\n", yes(p.BufRing))
	fmt.Fprintf(&b, "  msg_ring:        %s\n", yes(p.MsgRing))
	fmt.Fprintf(&b, "  min_wait:        %s\n", yes(p.MinWait))
	fmt.Fprintf(&b, "  bundles:         %s\n", yes(p.Bundles))
	fmt.Fprintf(&b, "  memlock:         %s soft, %s hard, CAP_IPC_LOCK %s",
		limitString(p.MemlockCur), limitString(p.MemlockMax), yes(p.IPCLock))
	return b.String()
}

func limitString(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10) + " bytes"
}

// Probe reports what io_uring can do here. The first call creates a
// throwaway ring on a locked OS thread of its own; the result is cached for
// the life of the process. Probe is safe for concurrent use.
func Probe() ProbeResult { return probeOnce() }

var probeOnce = sync.OnceValue(probe)
