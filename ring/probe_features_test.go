package ring

import (
	"strings"
	"testing"
)

// TestKernelFeaturesTable checks the table's own sense: every entry says
// what it is, from when, what for, and how the probe finds it, and the
// runner's hard requirements are no newer than the release the package
// documentation promises (5.19).
func TestKernelFeaturesTable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range KernelFeatures() {
		if f.Name == "" || f.Use == "" || f.has == nil || f.Major < 5 {
			t.Errorf("incomplete entry %+v", f)
		}
		if seen[f.Name] {
			t.Errorf("%s is listed twice", f.Name)
		}
		seen[f.Name] = true
		if strings.Contains(f.Use, "the runner needs it") && (f.Major > 5 || f.Minor > 19) {
			t.Errorf("%v: the runner needs it, but the package promises 5.19", f)
		}
	}
	var none ProbeResult
	for _, f := range KernelFeatures() {
		if none.Has(f) {
			t.Errorf("an empty probe has %v", f)
		}
	}
	if got := KernelFeatures(); len(got) > 0 {
		got[0].Name = "changed"
		if KernelFeatures()[0].Name == "changed" {
			t.Error("KernelFeatures returns the table itself, not a copy")
		}
	}
}
