package run

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/benchtest"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/peers"
)

// TestUDPWire runs short UDP rows on the veth wire, a runner's sink and
// Go's reference sink, at a rate every sink keeps and one fio cannot
// reach, then the runner's sink under the built-in generator's many
// senders, and checks that every datagram the load sent is accounted
// for: it was delivered, or the socket dropped it, or it never reached
// UDP (and then the namespace's counters say so). It skips without fio or
// a wire unless SLUICE_REQUIRE_FIO=1 or SLUICE_REQUIRE_URING=1 says they
// must be there.
func TestUDPWire(t *testing.T) {
	needFio(t)
	buildTestWire(t, harness.WireSpec{}).Close() // skips where no wire can be built
	bin := benchtest.BuildCLI(t)
	gnetBin := buildGnetSinkForTest(t)
	avail, _ := bench.AvailableRunners(harness.AllRunners())
	jsonPath := filepath.Join(t.TempDir(), "udp.json")
	stdout, stderr, status := benchtest.RunCLI(t, bin, "run", "--proto", "udp", "--client", "fio", "--wire", "veth", "--runners", avail[0],
		"--peers", "go", "--gnet-sink", gnetBin, "--sources", "2", "--msg-size", "512", "--duration", "1s",
		"--udp-rate", "20k,2M", "--json", jsonPath)
	if status != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	rep := readUDPReport(t, jsonPath, stdout)
	rows := checkUDPAccounting(t, rep, fioUDPMessages)
	if !rows[avail[0]] || !rows[peers.Go] {
		t.Errorf("rows measured: %v, want %s and go", rows, avail[0])
	}
	if len(rep.Sustained) != 2 {
		t.Errorf("a sweep with no verdict per row: %+v", rep.Sustained)
	}

	stdout, stderr, status = benchtest.RunCLI(t, bin, "run", "--proto", "udp", "--client", "gen", "--wire", "veth", "--runners", avail[0],
		"--sources", "300", "--msg-size", "128", "--duration", "1s", "--udp-rate", "30k", "--json", jsonPath)
	if status != 0 {
		t.Fatalf("run --client gen: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	if rows := checkUDPAccounting(t, readUDPReport(t, jsonPath, stdout), 0); !rows[avail[0]] {
		t.Errorf("rows measured under the generator: %v, want %s", rows, avail[0])
	}
	if left := deadWires(t); len(left) > 0 {
		t.Fatalf("run left behind: %v", left)
	}
}

// readUDPReport reads a `run --proto udp` report and checks that it is
// whole and from the veth wire.
func readUDPReport(t *testing.T, path, stdout string) *UDPRunReport {
	t.Helper()
	t.Logf("run:\n%s", stdout)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep UDPRunReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Wire.Mode != harness.WireVeth || len(rep.Runs) == 0 {
		t.Fatalf("ok %v, wire %q, %d runs\n%s", rep.OK, rep.Wire.Mode, len(rep.Runs), stdout)
	}
	return &rep
}

// checkUDPAccounting checks every run of rep, whose load sends small
// messages per sender besides its datagrams, and returns the rows
// measured.
func checkUDPAccounting(t *testing.T, rep *UDPRunReport, small uint64) map[string]bool {
	t.Helper()
	rows := map[string]bool{}
	for _, r := range rep.Runs {
		rows[r.Runner] = true
		sent := r.Offered + small*uint64(rep.Config.Sources)
		got := r.Delivered + r.Others
		switch {
		case r.Offered == 0 || r.Delivered == 0:
			t.Errorf("%s at %v: offered %d, delivered %d", r.Runner, r.RateDps, r.Offered, r.Delivered)
		case r.Delivered > r.Offered || r.Others > small*uint64(rep.Config.Sources):
			t.Errorf("%s at %v: delivered %d and %d others of %d offered", r.Runner, r.RateDps, r.Delivered, r.Others, r.Offered)
		case r.SocketDrops < 0:
			t.Errorf("%s at %v: the socket's drops unknown", r.Runner, r.RateDps)
		case r.BeforeUDP < 0 || sent-got != uint64(r.SocketDrops)+uint64(r.BeforeUDP):
			t.Errorf("%s at %v: the load sent %d, the sink got %d, the socket dropped %d and %d never reached UDP: they do not add up",
				r.Runner, r.RateDps, sent, got, r.SocketDrops, r.BeforeUDP)
		case uint64(r.SocketDrops) != r.SNMP.InErrors || r.SNMP.InDatagrams != got:
			t.Errorf("%s at %v: socket drops %d, got %d; the namespace's Udp counters %+v", r.Runner, r.RateDps, r.SocketDrops, got, r.SNMP)
		case r.CoreSPerM <= 0 || r.SinkSPerM <= 0 || r.LoadCoreUtil <= 0:
			t.Errorf("%s at %v: core %v and sink %v s per million, load core %v", r.Runner, r.RateDps, r.CoreSPerM, r.SinkSPerM, r.LoadCoreUtil)
		case !peers.IsRow(r.Runner) && (r.Counters == nil || r.Counters.Reads == 0 || r.DatagramsPerRead <= 0):
			t.Errorf("%s at %v: the runner's counters %+v, %v datagrams per read", r.Runner, r.RateDps, r.Counters, r.DatagramsPerRead)
		}
	}
	return rows
}
