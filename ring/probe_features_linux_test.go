package ring

import "testing"

// TestKernelFeaturesOfThisKernel fails when the running kernel is as new
// as a feature's release but the probe does not find the feature: either
// the probe broke or the table's release is wrong. Features newer than
// the kernel skip. This is what lets the other tests skip on old kernels
// without hiding a probe that stopped seeing a feature.
func TestKernelFeaturesOfThisKernel(t *testing.T) {
	p := requireURing(t)
	for _, f := range KernelFeatures() {
		t.Run(f.Name, func(t *testing.T) {
			switch {
			case p.Has(f):
			case p.Kernel.AtLeast(f.Major, f.Minor):
				t.Errorf("kernel %s is %d.%d or newer, but the probe finds no %s (sluice uses it for: %s)\n%v",
					p.Kernel, f.Major, f.Minor, f.Name, f.Use, p)
			default:
				t.Skipf("kernel %s is older than %v", p.Kernel, f)
			}
		})
	}
}
