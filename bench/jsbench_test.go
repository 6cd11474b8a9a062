package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIJetStream runs the jetstream command small: the generator and
// the NATS server run as processes of their own, every byte arrives, and
// the report gives each process's CPU.
func TestCLIJetStream(t *testing.T) {
	bin := buildCLI(t)
	out, errOut, status := runCLI(t, bin, "jetstream", "--conns", "50", "--per-conn", "64Ki", "--write", "4Ki", "--storage", "memory")
	if status != 0 {
		t.Fatalf("status %d\n%s", status, errOut)
	}
	var rep JetStreamReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.Command != "jetstream" || rep.Bytes != 50*64<<10 || rep.Messages == 0 || rep.SluiceCPUS <= 0 || rep.ServerCPUS <= 0 {
		t.Fatalf("report: %+v", rep)
	}
	_, errOut, status = runCLI(t, bin, "jetstream", "--storage", "tape")
	if status != 2 || !strings.Contains(errOut, "--storage") {
		t.Fatalf("bad flag: status %d\n%s", status, errOut)
	}
}
