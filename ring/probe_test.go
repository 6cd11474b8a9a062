package ring

import "testing"

func TestParseKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		in                  string
		major, minor, patch int
	}{
		{"6.18.44-fc-v769", 6, 18, 44},
		{"5.15.0-91-generic", 5, 15, 0},
		{"6.1", 6, 1, 0},
		{"6.10.0-rc1+", 6, 10, 0},
	} {
		v := parseKernelVersion(tc.in)
		if v.Major != tc.major || v.Minor != tc.minor || v.Patch != tc.patch || v.Release != tc.in {
			t.Errorf("parseKernelVersion(%q) = %+v", tc.in, v)
		}
	}
	if v := parseKernelVersion("6.1.0"); !v.AtLeast(6, 1) || !v.AtLeast(5, 19) || v.AtLeast(6, 2) {
		t.Errorf("AtLeast is wrong for %v", v)
	}
}
