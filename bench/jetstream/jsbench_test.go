package jetstream

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench/benchtest"
	"github.com/sluice-io/sluice/bench/harness"
)

// TestCLIJetStream runs the jetstream command small: the generator and
// the NATS server run as processes of their own, every byte arrives, and
// the report gives each process's CPU.
func TestCLIJetStream(t *testing.T) {
	bin := benchtest.BuildCLI(t)
	out, errOut, status := benchtest.RunCLI(t, bin, "jetstream", "--conns", "50", "--per-conn", "64Ki", "--write", "4Ki", "--storage", "memory")
	if status != 0 {
		t.Fatalf("status %d\n%s", status, errOut)
	}
	var rep JetStreamReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.Command != "jetstream" || rep.Bytes != 50*64<<10 || rep.Messages < 50 || rep.SluiceCPUS <= 0 || rep.ServerCPUS <= 0 ||
		rep.BufSize != DefaultJetStreamBufSize {
		t.Fatalf("report: %+v", rep)
	}
	// Pinned by default: sluice and the server on CPUs of their own.
	if cpus := harness.AllowedCPUs(); len(cpus) >= 2 {
		p := rep.Pinning
		if !p.Enabled || len(p.EngineCPUs) == 0 || len(p.GenCPUs) == 0 || len(p.EngineCPUs)+len(p.GenCPUs) != len(cpus) ||
			slices.ContainsFunc(p.EngineCPUs, func(c int) bool { return slices.Contains(p.GenCPUs, c) }) {
			t.Fatalf("pinning on CPUs %v: %+v", cpus, p)
		}
	}
	for flag, bad := range map[string]string{"--storage": "tape", "--buf-size": "1Ki"} {
		_, errOut, status = benchtest.RunCLI(t, bin, "jetstream", flag, bad)
		if status != 2 || !strings.Contains(errOut, flag) {
			t.Fatalf("%s %s: status %d\n%s", flag, bad, status, errOut)
		}
	}
}
