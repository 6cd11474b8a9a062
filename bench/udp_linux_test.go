package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestUDPWire runs short UDP rows on the veth wire, a runner's sink and
// Go's reference sink, at a rate every sink keeps and one fio cannot
// reach, and checks that every datagram fio sent is accounted for: it
// was delivered, or the socket dropped it, or it never reached UDP (and
// then the namespace's counters say so). It skips without fio or a wire
// unless SLUICE_REQUIRE_FIO=1 or SLUICE_REQUIRE_URING=1 says they must be
// there.
func TestUDPWire(t *testing.T) {
	needFio(t)
	buildTestWire(t, wireSpec{}).Close() // skips where no wire can be built
	bin := buildCLI(t)
	gnetBin := buildGnetSinkForTest(t)
	avail, _ := availableRunners(AllRunners())
	jsonPath := filepath.Join(t.TempDir(), "udp.json")
	stdout, stderr, status := runCLI(t, bin, "run", "--proto", "udp", "--client", "fio", "--wire", "veth", "--runners", avail[0],
		"--peers", "go", "--gnet-sink", gnetBin, "--sources", "2", "--msg-size", "512", "--duration", "1s",
		"--udp-rate", "20k,2M", "--json", jsonPath)
	if status != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	t.Logf("run:\n%s", stdout)
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep UDPRunReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Wire.Mode != WireVeth || len(rep.Runs) == 0 {
		t.Fatalf("ok %v, wire %q, %d runs\n%s", rep.OK, rep.Wire.Mode, len(rep.Runs), stdout)
	}
	rows := map[string]bool{}
	for _, r := range rep.Runs {
		rows[r.Runner] = true
		sent := r.Offered + fioUDPMessages*uint64(rep.Config.Sources)
		got := r.Delivered + r.Others
		switch {
		case r.Offered == 0 || r.Delivered == 0:
			t.Errorf("%s at %v: offered %d, delivered %d", r.Runner, r.RateDps, r.Offered, r.Delivered)
		case r.Delivered > r.Offered || r.Others > fioUDPMessages*uint64(rep.Config.Sources):
			t.Errorf("%s at %v: delivered %d and %d others of %d offered", r.Runner, r.RateDps, r.Delivered, r.Others, r.Offered)
		case r.SocketDrops < 0:
			t.Errorf("%s at %v: the socket's drops unknown", r.Runner, r.RateDps)
		case r.BeforeUDP < 0 || sent-got != uint64(r.SocketDrops)+uint64(r.BeforeUDP):
			t.Errorf("%s at %v: fio sent %d, the sink got %d, the socket dropped %d and %d never reached UDP: they do not add up",
				r.Runner, r.RateDps, sent, got, r.SocketDrops, r.BeforeUDP)
		case uint64(r.SocketDrops) != r.SNMP.InErrors || r.SNMP.InDatagrams != got:
			t.Errorf("%s at %v: socket drops %d, got %d; the namespace's Udp counters %+v", r.Runner, r.RateDps, r.SocketDrops, got, r.SNMP)
		case r.CoreSPerM <= 0 || r.SinkSPerM <= 0 || r.LoadCoreUtil <= 0:
			t.Errorf("%s at %v: core %v and sink %v s per million, load core %v", r.Runner, r.RateDps, r.CoreSPerM, r.SinkSPerM, r.LoadCoreUtil)
		}
	}
	if !rows[avail[0]] || !rows[PeerGo] {
		t.Errorf("rows measured: %v, want %s and go", rows, avail[0])
	}
	if len(rep.Sustained) != 2 {
		t.Errorf("a sweep with no verdict per row: %+v", rep.Sustained)
	}
	if left := deadWires(t); len(left) > 0 {
		t.Fatalf("run left behind: %v", left)
	}
}
