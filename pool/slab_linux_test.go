//go:build linux

package pool

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rss returns the process's resident memory, from /proc/self/statm.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no statm: %v", err)
	}
	pages, err := strconv.ParseInt(strings.Fields(string(b))[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// TestSlabResidency: by default the slab's pages become resident only as
// buffers are written, so a new pool costs next to nothing; Prefault
// makes all of them resident at New. The slab is large (32 MiB) against
// what else the process may touch meanwhile, and the bounds are half of
// it apart, so the test does not depend on timing.
func TestSlabResidency(t *testing.T) {
	const bufs, size = 512, 64 << 10
	const slab = bufs * size
	for _, tc := range []struct {
		name     string
		prefault bool
		min, max int64 // growth of RSS across New
	}{
		{"default", false, 0, slab / 4},
		{"prefault", true, slab * 3 / 4, 1 << 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rss(t)
			p := newPool(t, Config{BufSize: size, Buffers: bufs, Prefault: tc.prefault})
			if d := rss(t) - before; d < tc.min || d > tc.max {
				t.Fatalf("RSS grew by %d KiB at New, want %d to %d KiB", d>>10, tc.min>>10, tc.max>>10)
			}
			if got := p.Config().Prefault; got != tc.prefault {
				t.Fatalf("Config().Prefault = %v", got)
			}
		})
	}
}
