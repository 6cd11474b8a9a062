package ring

import (
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/runner/uring"
)

func TestProbe(t *testing.T) {
	p := requireURing(t)
	s := p.String()
	t.Logf("\n%s", s)
	for _, want := range []string{"io_uring: supported", "kernel:", "setup flags:", "memlock:"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q", want)
		}
	}
	for _, op := range requiredOps() {
		if !p.hasOp(op) {
			t.Errorf("supported, but HasOp(%v) is false", op)
		}
	}
	if !p.FitsMemlock(0) {
		t.Error("FitsMemlock(0) is false")
	}
	if !p.IPCLock && p.MemlockCur != ^uint64(0) && p.FitsMemlock(int64(p.MemlockCur)+1) {
		t.Error("FitsMemlock over the limit is true")
	}
	// Fail, not skip, when a kernel new enough lacks a feature it should have.
	k := p.Kernel
	for _, f := range []struct {
		name   string
		have   bool
		major  int
		minor  int
		orFlag uring.SetupFlags
	}{
		{"multishot poll", p.MultishotPoll, 5, 13, 0},
		{"multishot accept", p.MultishotAccept, 5, 19, 0},
		{"buffer rings", p.BufRing, 5, 19, 0},
		{"cancel by fd", p.CancelFd, 5, 19, 0},
		{"multishot recv", p.MultishotRecv, 6, 0, 0},
		{"SINGLE_ISSUER", p.Flags&uring.SetupSingleIssuer != 0, 6, 0, 0},
		{"DEFER_TASKRUN", p.Flags&uring.SetupDeferTaskrun != 0, 6, 1, 0},
		{"bundles", p.Bundles, 6, 10, 0},
		{"min_wait", p.MinWait, 6, 12, 0},
	} {
		if k.AtLeast(f.major, f.minor) && !f.have {
			t.Errorf("kernel %v lacks %s (added in %d.%d)", k, f.name, f.major, f.minor)
		}
	}
	if again := Probe(); again.Kernel != p.Kernel || again.Flags != p.Flags {
		t.Error("Probe is not cached")
	}
}
