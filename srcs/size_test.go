package srcs_test

import (
	"math"
	"strings"
	"testing"

	"github.com/dustin/go-humanize"

	"github.com/sluice-io/sluice/srcs"
)

// FuzzParseSize: the framers' sizes read as the node file's do (which
// go-humanize reads): where both read a size up to what a framer takes,
// they agree; srcs reads no size that go-humanize refuses.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "64KiB", "64kib", "64KB", "64k", "1MiB", "1 MiB", "1.5KiB", "0.5", "2GiB", "1e3", "-1", "abc", " 7 b ", "3.TiB", ".5k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := srcs.ParseSize(s)
		want, herr := humanize.ParseBytes(strings.TrimSpace(s)) // as the node file reads it
		switch {
		case err != nil:
			return // stricter is fine: ParseFraming then says what it takes
		case herr != nil:
			t.Fatalf("ParseSize(%q) = %d; go-humanize refuses it: %v", s, got, herr)
		case want <= math.MaxInt32 && got != want:
			t.Fatalf("ParseSize(%q) = %d, go-humanize %d", s, got, want)
		}
	})
}
