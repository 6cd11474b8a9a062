package ring

import (
	"runtime"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requireURing skips the test when the probe finds io_uring unusable, or
// fails it when SLUICE_REQUIRE_URING=1 (CI sets it).
func requireURing(t testing.TB) ProbeResult {
	t.Helper()
	p := Probe()
	srcstest.RequireURing(t, p.Supported, p.Reason)
	return p
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

// requireFeature skips t when the kernel lacks the feature named name in
// KernelFeatures, and fails it when the kernel is as new as the feature's
// release or newer (so a feature that goes missing is a regression, not a
// skip).
func requireFeature(t testing.TB, name string) {
	t.Helper()
	p := requireURing(t)
	f := kernelFeature(t, name)
	if p.Has(f) {
		return
	}
	if p.Kernel.AtLeast(f.Major, f.Minor) {
		t.Fatalf("kernel %s should have %v", p.Kernel, f)
	}
	t.Skipf("kernel %s lacks %v", p.Kernel, f)
}

// kernelFeature returns the entry of KernelFeatures named name.
func kernelFeature(t testing.TB, name string) KernelFeature {
	t.Helper()
	for _, f := range KernelFeatures() {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no kernel feature named %q", name)
	return KernelFeature{}
}
