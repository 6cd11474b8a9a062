package srcstest_test

import (
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// verdictTB records whether a helper skipped or failed, instead of doing
// it. The first verdict stands, as the real one would end the test.
type verdictTB struct {
	testing.TB
	verdict string
}

func (v *verdictTB) Helper() {}

func (v *verdictTB) Skipf(f string, args ...any) { v.record("skip: " + fmt.Sprintf(f, args...)) }

func (v *verdictTB) Fatalf(f string, args ...any) { v.record("fail: " + fmt.Sprintf(f, args...)) }

func (v *verdictTB) record(s string) {
	if v.verdict == "" {
		v.verdict = s
	}
}

func TestRequireURing(t *testing.T) {
	for _, tt := range []struct {
		name      string
		supported bool
		env       string
		want      string
	}{
		{"supported", true, "", ""},
		{"supported, required", true, "1", ""},
		{"unsupported", false, "", "skip: io_uring unsupported: no luck; SLUICE_REQUIRE_URING=1 fails instead"},
		{"unsupported, required", false, "1", "fail: io_uring required (SLUICE_REQUIRE_URING=1) but unsupported: no luck"},
		{"unsupported, other value", false, "0", "skip: io_uring unsupported: no luck; SLUICE_REQUIRE_URING=1 fails instead"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(srcstest.EnvRequireURing, tt.env)
			v := &verdictTB{TB: t}
			srcstest.RequireURing(v, tt.supported, "no luck")
			if v.verdict != tt.want {
				t.Errorf("verdict %q, want %q", v.verdict, tt.want)
			}
		})
	}
}
