package ring

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/runner/uring"
)

func probe() ProbeResult {
	var p ProbeResult
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		p.Kernel = parseKernelVersion(unix.ByteSliceToString(uts.Release[:]))
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil {
		p.MemlockCur, p.MemlockMax = rl.Cur, rl.Max
	}
	p.IPCLock = hasCapability(unix.CAP_IPC_LOCK)

	// SINGLE_ISSUER ties the ring to its thread: give it one of its own.
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p.probeRing()
	}()
	<-done
	return p
}

func (p *ProbeResult) probeRing() {
	r, err := uring.New(uring.Config{Entries: 8})
	if err != nil {
		p.Reason, p.Err = strings.TrimPrefix(err.Error(), "ring: "), err
		return
	}
	defer r.Close()
	p.Flags, p.Features = r.Flags(), r.Features()

	if p.ops, err = r.SupportedOps(); err != nil {
		p.Reason, p.Err = strings.TrimPrefix(err.Error(), "ring: "), err
		return
	}
	for _, op := range requiredOps() {
		if !p.hasOp(op) {
			p.MissingOps = append(p.MissingOps, op)
		}
	}
	p.MultishotAccept = p.hasOp(uring.OpSocket)
	p.CancelFd = p.hasOp(uring.OpSocket)
	p.MultishotRecv = p.hasOp(uring.OpSendZC)
	p.MultishotPoll = p.Features&uring.FeatRsrcTags != 0
	p.MsgRing = p.hasOp(uring.OpMsgRing)
	p.MinWait = p.Features&uring.FeatMinTimeout != 0
	p.Bundles = p.Features&uring.FeatRecvsendBundle != 0
	if br, err := r.RegisterBufRing(1, 0); err == nil {
		p.BufRing = true
		r.UnregisterBufRing(br)
	}
	if len(p.MissingOps) > 0 {
		p.Err = &uring.NotSupportedError{Op: "probe", Reason: fmt.Sprintf("kernel %s lacks required opcodes %v", p.Kernel, p.MissingOps)}
		p.Reason = strings.TrimPrefix(p.Err.Error(), "ring: ")
		return
	}
	p.Supported = true
}

// hasCapability reads the effective capability set from /proc/self/status.
func hasCapability(c int) bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<c) != 0
		}
	}
	return false
}
