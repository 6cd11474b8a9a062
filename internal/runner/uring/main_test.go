package uring

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// kernel is what this package's tests need to know of the running kernel:
// whether a ring can be set up and why not, its release, the setup flags a
// ring asking for DefaultFlags is granted, its feature bits and opcodes.
// ring.Probe is the whole probe; this package sits below it.
type kernel struct {
	ok           bool
	why          string
	major, minor int
	flags        SetupFlags
	feats        Features
	ops          OpSet
}

// atLeast reports whether the kernel is major.minor or newer.
func (k kernel) atLeast(major, minor int) bool {
	return k.major > major || k.major == major && k.minor >= minor
}

var probeKernel = sync.OnceValue(func() kernel {
	var k kernel
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &k.major, &k.minor)
	}
	done := make(chan struct{})
	go func() { // SINGLE_ISSUER ties the ring to its thread: give it one of its own
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r, err := New(Config{Entries: 8})
		if err != nil {
			k.why = err.Error()
			return
		}
		defer r.Close()
		k.flags, k.feats = r.Flags(), r.Features()
		if k.ops, err = r.SupportedOps(); err != nil {
			k.why = err.Error()
			return
		}
		k.ok = true
	}()
	<-done
	return k
})

// requireURing skips the test when no ring can be set up, or fails it when
// SLUICE_REQUIRE_URING=1 (CI sets it).
func requireURing(t testing.TB) kernel {
	t.Helper()
	k := probeKernel()
	srcstest.RequireURing(t, k.ok, k.why)
	return k
}

// requireFeature skips t when the kernel lacks what, and fails it when the
// kernel is major.minor or newer, the release that brought what (so a
// feature that goes missing is a regression, not a skip).
func requireFeature(t testing.TB, what string, has func(kernel) bool, major, minor int) {
	t.Helper()
	k := requireURing(t)
	if has(k) {
		return
	}
	if k.atLeast(major, minor) {
		t.Fatalf("kernel %d.%d should have %s (%d.%d)", k.major, k.minor, what, major, minor)
	}
	t.Skipf("kernel %d.%d lacks %s (%d.%d)", k.major, k.minor, what, major, minor)
}

// runLocked runs fn on a new goroutine locked to its OS thread, as a ring's
// owner must be, and waits for it. It goes through t.Run so fn may call
// t.Fatal. The goroutine never unlocks: t.Cleanup functions run on it after
// fn returns and still see the same thread, and the thread exits with it.
func runLocked(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	t.Run("locked", func(t *testing.T) {
		runtime.LockOSThread()
		fn(t)
	})
}
