package ring

import (
	"fmt"

	"github.com/sluice-io/sluice/internal/runner/uring"
)

// KernelFeature is one io_uring capability the probe looks for, with the
// first kernel release that has it and what sluice does with it. The list
// is data ([KernelFeatures]) so that the docs, the probe and the tests
// read one table, and a test fails when a kernel new enough for a feature
// is found without it: a probe that stops seeing a feature is a bug, not
// an old kernel.
type KernelFeature struct {
	// Name is the kernel's name for the feature, or for the opcode or
	// flag whose presence stands in for it.
	Name string
	// Major and Minor are the first release that has it.
	Major, Minor int
	// Use says what sluice uses it for, or that it is probed but not used.
	Use string

	has func(ProbeResult) bool
}

// String names the feature and its release, such as
// "IORING_FEAT_EXT_ARG (5.11)".
func (f KernelFeature) String() string { return fmt.Sprintf("%s (%d.%d)", f.Name, f.Major, f.Minor) }

// Has reports whether the probe found f.
func (p ProbeResult) Has(f KernelFeature) bool { return f.has != nil && f.has(p) }

func hasFlag(flag uring.SetupFlags) func(ProbeResult) bool {
	return func(p ProbeResult) bool { return p.Flags&flag != 0 }
}

func hasFeat(feat uring.Features) func(ProbeResult) bool {
	return func(p ProbeResult) bool { return p.Features&feat != 0 }
}

func hasOps(ops ...uring.Op) func(ProbeResult) bool {
	return func(p ProbeResult) bool {
		for _, op := range ops {
			if !p.hasOp(op) {
				return false
			}
		}
		return true
	}
}

// kernelFeatures is the table. Setup flags count when a ring that asked
// for DefaultFlags was granted them. The optional features the kernel
// offers no direct probe for are found as ProbeResult documents.
var kernelFeatures = [...]KernelFeature{
	{"IORING_REGISTER_PROBE and the required opcodes", 5, 6,
		"every read, receive, accept, poll and cancel the uring runner submits", hasOps(requiredOps()...)},
	{"IORING_FEAT_SINGLE_MMAP", 5, 4,
		"one mapping for the submission and completion rings", hasFeat(uring.FeatSingleMmap)},
	{"IORING_FEAT_EXT_ARG", 5, 11,
		"a worker waits for completions or its next flush deadline in one io_uring_enter; the runner needs it", hasFeat(uring.FeatExtArg)},
	{"IORING_SETUP_SUBMIT_ALL", 5, 18,
		"a failed entry does not hold back the rest of a worker's batch", hasFlag(uring.SetupSubmitAll)},
	{"IORING_SETUP_COOP_TASKRUN", 5, 19,
		"completion work waits for the worker's next enter instead of interrupting it", hasFlag(uring.SetupCoopTaskrun)},
	{"IORING_SETUP_TASKRUN_FLAG", 5, 19,
		"the ring says when completion work is pending, so a worker enters only then", hasFlag(uring.SetupTaskrunFlag)},
	{"IORING_SETUP_SINGLE_ISSUER", 6, 0,
		"a ring belongs to its worker's thread, and the kernel skips the locking", hasFlag(uring.SetupSingleIssuer)},
	{"IORING_SETUP_DEFER_TASKRUN", 6, 1,
		"completion work runs only when the worker enters, batched with its wait", hasFlag(uring.SetupDeferTaskrun)},
	{"IORING_ASYNC_CANCEL_FD (found through IORING_OP_SOCKET)", 5, 19,
		"stopping a source cancels its reads by descriptor; the runner needs it", func(p ProbeResult) bool { return p.CancelFd }},
	{"sparse registered files (IORING_RSRC_REGISTER_SPARSE, found through IORING_OP_SOCKET)", 5, 19,
		"listeners accept on the workers' rings straight into each worker's file table, outside RLIMIT_NOFILE (engine.Config.FileSlots)", func(p ProbeResult) bool { return p.CancelFd }},
	{"IORING_FEAT_MIN_TIMEOUT", 6, 12,
		"BatchWait: a worker gathers completions for up to min_wait while many sources poll", hasFeat(uring.FeatMinTimeout)},
	{"multishot poll (found through IORING_FEAT_RSRC_TAGS)", 5, 13,
		"probed, not used yet", func(p ProbeResult) bool { return p.MultishotPoll }},
	{"IORING_OP_MSG_RING", 5, 18,
		"probed, not used yet: waking a worker ring to ring", func(p ProbeResult) bool { return p.MsgRing }},
	{"multishot accept (found through IORING_OP_SOCKET)", 5, 19,
		"probed, not used: listeners' accepts are single-shot, each with its own sockaddr, so every connection is named and Allow applies (a multishot accept shares one)", func(p ProbeResult) bool { return p.MultishotAccept }},
	{"provided buffer rings (IORING_REGISTER_PBUF_RING)", 5, 19,
		"probed, not used yet: receives into buffers the pool provides", func(p ProbeResult) bool { return p.BufRing }},
	{"multishot recv (found through IORING_OP_SEND_ZC)", 6, 0,
		"probed, not used yet: many receives from one request", func(p ProbeResult) bool { return p.MultishotRecv }},
	{"IORING_FEAT_RECVSEND_BUNDLE", 6, 10,
		"probed, not used yet: several provided buffers in one receive", func(p ProbeResult) bool { return p.Bundles }},
}

// KernelFeatures returns the io_uring features the probe looks for, each
// with its first kernel release and what sluice uses it for: first what
// the runner needs or uses when present, then what is probed for work to
// come. The slice is the caller's.
func KernelFeatures() []KernelFeature { return append([]KernelFeature(nil), kernelFeatures[:]...) }
