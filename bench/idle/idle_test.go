package idle

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/benchtest"
	"github.com/sluice-io/sluice/bench/report"
)

func TestCountList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"10000,100000", []int{10000, 100000}, false},
		{"10k, 100k", []int{10000, 100000}, false},
		{"1_000", []int{1000}, false},
		{"", nil, false},
		{"ten", nil, true},
		{"-5", nil, true},
	} {
		var l CountList
		err := l.Set(tt.in)
		if (err != nil) != tt.bad {
			t.Errorf("Set(%q): err %v, want bad %v", tt.in, err, tt.bad)
			continue
		}
		if !tt.bad && !slices.Equal(l, tt.want) {
			t.Errorf("Set(%q) = %v, want %v", tt.in, l, tt.want)
		}
	}
}

func TestIdleConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*IdleConfig)
		want string // a substring of the error; "" for none
	}{
		{"defaults", func(*IdleConfig) {}, ""},
		{"no levels", func(c *IdleConfig) { c.Idle = nil }, "--idle: at least one"},
		{"descending", func(c *IdleConfig) { c.Idle = CountList{100, 10} }, "must ascend"},
		{"burst above the first level", func(c *IdleConfig) { c.Idle, c.Burst = CountList{100, 200}, 150 }, "--burst"},
		{"no active", func(c *IdleConfig) { c.Active = 0 }, ""},
		{"tiny messages", func(c *IdleConfig) { c.MsgSize = 8 }, "--msg-size"},
		{"bad runner", func(c *IdleConfig) { c.Runners = report.StringList{"fibre"} }, "--runners"},
		{"too many per pair", func(c *IdleConfig) { c.SourceAddrs, c.Listeners = 1, 1 }, "per (source, listener) pair"},
		{"too many addresses", func(c *IdleConfig) { c.Idle, c.Listeners = CountList{5_000_000}, 1 }, "source addresses"},
		{"rate without profile", func(c *IdleConfig) { c.MemProfileRate = 1 }, "--memprofile-rate"},
		{"framed", func(c *IdleConfig) { c.Engine.Framing = "newline" }, "--framing"},
		{"negative client conns", func(c *IdleConfig) { c.ClientConns = -1 }, "--client-conns"},
		{"huge file tables", func(c *IdleConfig) { c.Engine.FileSlots = 1 << 21 }, "--file-slots"},
		{"no file tables", func(c *IdleConfig) { c.Engine.FileSlots = -1 }, ""},
	} {
		c := DefaultIdleConfig()
		tt.edit(&c)
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: unexpected %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestIdleAddressPlan(t *testing.T) {
	c := DefaultIdleConfig()
	if got := c.sourceAddrs(); got != idleMinSourceAddrs {
		t.Errorf("100,000 over 4 listeners: %d source addresses, want %d", got, idleMinSourceAddrs)
	}
	if got := c.perPair(); got != 6250 {
		t.Errorf("100,000 over 16 pairs: %d per pair, want 6250", got)
	}
	c.Idle = CountList{10000, 1000000}
	if n := c.sourceAddrs(); n*c.Listeners*idlePerPair < 1000000 || c.perPair() > idlePerPair {
		t.Errorf("1,000,000: %d source addresses, %d per pair", n, c.perPair())
	}
	if got := c.burst(); got != DefaultIdleBurst {
		t.Errorf("burst %d, want %d", got, DefaultIdleBurst)
	}
	c.Idle = CountList{500}
	if got := c.burst(); got != 500 {
		t.Errorf("burst with a first level of 500: %d", got)
	}
	if got := idleListenAddrs(2); !slices.Equal(got, []string{"127.0.0.11:0", "127.0.0.12:0"}) {
		t.Errorf("listeners %v", got)
	}
	if got := idleSourceAddrs(1); !slices.Equal(got, []string{"127.0.0.101"}) {
		t.Errorf("sources %v", got)
	}
}

func TestPerIdleConn(t *testing.T) {
	a := &IdleLevel{Idle: 1000, Sink: IdleMem{RSS: 10 << 20}, Scavenged: IdleMem{RSS: 8 << 20, HeapInuse: 4 << 20, HeapObjs: 5000, Goroutines: 10},
		Kernel: KernelMem{SocketsUsed: 2100, Slab: 100 << 20, Caches: map[string]SlabCache{"TCP": {Objects: 2000, ObjSize: 2368}}}}
	b := &IdleLevel{Idle: 11000, Sink: IdleMem{RSS: 10<<20 + 30_000_000}, Scavenged: IdleMem{RSS: 8<<20 + 20_000_000, HeapInuse: 4<<20 + 15_000_000, HeapObjs: 75000, Goroutines: 10},
		Kernel: KernelMem{SocketsUsed: 22100, Slab: 100<<20 + 90_000_000, Caches: map[string]SlabCache{"TCP": {Objects: 22000, ObjSize: 2368}, "tiny": {Objects: 1, ObjSize: 8}}}}
	pc := perIdleConn(a, b)
	for _, x := range []struct {
		name      string
		got, want float64
	}{
		{"rss", pc.RSS, 3000}, {"rss_scavenged", pc.RSSScavenged, 2000}, {"heap", pc.HeapInuse, 1500},
		{"objects", pc.HeapObjects, 7}, {"goroutines", pc.Goroutines, 0}, {"sockets", pc.Sockets, 2}, {"slab", pc.SlabBytes, 9000},
	} {
		if math.Abs(x.got-x.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", x.name, x.got, x.want)
		}
	}
	if len(pc.Caches) != 1 || pc.Caches[0].Cache != "TCP" || pc.Caches[0].Objects != 2 || pc.Caches[0].Bytes != 2*2368 {
		t.Errorf("caches %+v, want TCP alone at 2 objects", pc.Caches)
	}
	if z := perIdleConn(a, a); z.RSS != 0 || z.From != 1000 {
		t.Errorf("no growth: %+v", z)
	}
}

func TestIdleTargets(t *testing.T) {
	runs := []*IdleRun{
		{Runner: "uring", ThreadsMax: 9, ThreadsTarget: 17, PerConn: IdlePerConn{RSS: 400}, Burst: IdleBurst{Seconds: 0.2},
			Without: &IdleActive{CPUSPerGiB: 1}, With: &IdleActive{CPUSPerGiB: 1.2}, CPURatio: 1.2},
		{Runner: "goroutine", ThreadsMax: 30, ThreadsTarget: 17, Burst: IdleBurst{Seconds: 0.1}},
	}
	got := map[string]bool{}
	for _, c := range idleTargets(runs) {
		got[c.Runner+": "+c.Target] = c.Met
	}
	want := map[string]bool{
		"uring: RSS per added idle connection <= 512 B":                 true,
		"uring: accept burst no slower than goroutine's":                false,
		"uring: threads <= workers + 16 (17)":                           true,
		"uring: active CPU-s/GiB beside the idle within 10% of without": false,
		"goroutine: threads <= workers + 16 (17)":                       false,
	}
	for k, v := range want {
		if m, ok := got[k]; !ok || m != v {
			t.Errorf("%s: met %v (present %v), want %v", k, m, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %v", got, want)
	}
}

// TestIdleCLI runs a small idle scenario end to end through the binary:
// 200 idle connections, held by three client processes, beside 4 active
// sources, on one runner.
func TestIdleCLI(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("idle needs Linux")
	}
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	avail, _ := bench.AvailableRunners(defaultIdleRunners())
	if len(avail) == 0 {
		t.Skip("no runner available")
	}
	runner := avail[0]
	bin := benchtest.BuildCLI(t)
	t.Run("scenario", func(t *testing.T) { testIdleCLIScenario(t, bin, runner) })
	if slices.Contains(avail, "uring") {
		t.Run("uring descriptors", func(t *testing.T) { testIdleCLIURingDescriptors(t, bin) })
	}
}

// testIdleCLIURingDescriptors runs a uring sink under a hard limit of
// 1,200 descriptors with 1,500 idle connections, which its worker's file
// table is planned to hold: it either holds them, the most in the
// table, or says at once that it ran out of descriptors, rather than
// waiting for connections it cannot accept.
func testIdleCLIURingDescriptors(t *testing.T, bin string) {
	jsonPath := filepath.Join(t.TempDir(), "idle.json")
	t0 := time.Now()
	stdout, stderr, status := benchtest.RunCLI(t, "sh", "-c", `ulimit -n 1200 && exec "$0" "$@"`, bin, "idle", "--runners", "uring", "--workers", "1",
		"--idle", "100,1500", "--burst", "100", "--active", "0", "--settle", "0", "--json", jsonPath)
	if !strings.Contains(stderr, "hard RLIMIT_NOFILE 1,200") || !strings.Contains(stderr, "3 idle clients") {
		t.Fatalf("not under a hard limit of 1,200, or not 3 clients: exit %d\n%s", status, stderr)
	}
	if status != 0 {
		if !strings.Contains(stderr, "the sink ran out of descriptors") || time.Since(t0) > idleStepTimeout/2 {
			t.Fatalf("idle: exit %d after %v\nstdout:\n%s\nstderr:\n%s", status, time.Since(t0), stdout, stderr)
		}
		return
	}
	rep := readIdleReport(t, jsonPath)
	if len(rep.Runs) != 1 || rep.Runs[0].FileSlots != 1200 || len(rep.Runs[0].ClientNoFile) != 3 {
		t.Fatalf("runs %+v", rep.Runs)
	}
	if l := rep.Runs[0].Levels[2]; l.Idle != 1500 || l.Sink.FDs >= 1200 {
		t.Errorf("at %d idle the sink held %d descriptors", l.Idle, l.Sink.FDs)
	}
}

// testIdleCLIScenario runs 200 idle connections, held by three client
// processes, beside 4 active sources, on runner.
func testIdleCLIScenario(t *testing.T, bin, runner string) {
	jsonPath := filepath.Join(t.TempDir(), "idle.json")
	heapDir := t.TempDir()
	stdout, stderr, status := benchtest.RunCLI(t, bin, "idle", "--runners", runner, "--idle", "100,200", "--burst", "100", "--client-conns", "80", "--active", "4",
		"--rate", "64KiB/s", "--duration", "1s", "--settle", "200ms", "--heap-profile", heapDir, "--json", jsonPath)
	if status != 0 {
		t.Fatalf("idle: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	if !strings.Contains(stdout, runner) || !strings.Contains(stdout, "target "+runner+": threads") {
		t.Errorf("no row or targets for %s:\n%s", runner, stdout)
	}
	rep := readIdleReport(t, jsonPath)
	if rep.Command != "idle" || !rep.OK || len(rep.Runs) != 1 || len(rep.Failed) != 0 || rep.Host.Kernel == "" {
		t.Fatalf("report: command %q ok %v runs %d failed %v", rep.Command, rep.OK, len(rep.Runs), rep.Failed)
	}
	r := rep.Runs[0]
	if r.Runner != runner || !r.Verified || r.Workers < 1 || r.ThreadsTarget != r.Workers+16 {
		t.Errorf("run: runner %s verified %v workers %d threads target %d", r.Runner, r.Verified, r.Workers, r.ThreadsTarget)
	}
	if r.ThreadsMax < 1 || r.ThreadsMax > 200 {
		t.Errorf("threads_max %d", r.ThreadsMax)
	}
	if r.SinkNoFile.Soft < r.SinkNoFile.Need {
		t.Errorf("the sink's RLIMIT_NOFILE below its need: %+v", r.SinkNoFile)
	}
	if !slices.Equal(r.ClientConns, []int{67, 67, 66}) || len(r.ClientNoFile) != 3 {
		t.Errorf("clients held %v (RLIMIT_NOFILE %+v), want 67, 67 and 66", r.ClientConns, r.ClientNoFile)
	}
	for i, l := range r.ClientNoFile {
		if l.Soft < l.Need || i < len(r.ClientConns) && l.Need != uint64(r.ClientConns[i]+idleFDMargin) {
			t.Errorf("client %d: RLIMIT_NOFILE %+v for %v connections", i, l, r.ClientConns)
		}
	}
	if uring := runner == "uring"; uring != (r.FileSlots > 0) || uring && r.SinkNoFile.Soft != r.SinkNoFile.Hard {
		t.Errorf("%s: file tables of %d slots, RLIMIT_NOFILE %+v", runner, r.FileSlots, r.SinkNoFile)
	}
	if r.Capped != "" {
		t.Errorf("capped: %s", r.Capped)
	}
	var idles []int
	for _, l := range r.Levels {
		idles = append(idles, l.Idle)
		if l.Sink.Sources != int64(l.Idle) || l.Scavenged.Sources != int64(l.Idle) {
			t.Errorf("level %d: the sink held %d", l.Idle, l.Sink.Sources)
		}
		if l.Sink.RSS <= 0 || l.Scavenged.HeapInuse == 0 || l.Sink.Threads < 1 || l.Kernel.SocketsUsed < int64(2*l.Idle) || l.Kernel.Slab <= 0 {
			t.Errorf("level %d: %+v, kernel %+v", l.Idle, l.Sink, l.Kernel)
		}
		// A uring worker's file table may hold the connections; the other
		// runners hold a descriptor for each.
		if l.Sink.FDs < 1 || runner != "uring" && l.Sink.FDs < l.Idle {
			t.Errorf("level %d: the sink held %d descriptors", l.Idle, l.Sink.FDs)
		}
		if _, err := os.Stat(l.HeapProfile); err != nil {
			t.Errorf("level %d: heap profile: %v", l.Idle, err)
		}
	}
	if !slices.Equal(idles, []int{0, 100, 200}) {
		t.Errorf("levels %v, want 0, 100, 200", idles)
	}
	pc := r.PerConn
	if pc.From != 100 || pc.To != 200 {
		t.Errorf("per connection from %d to %d, want 100 to 200", pc.From, pc.To)
	}
	// Every engine keeps objects per source; a few hundred would be a
	// leak in the measurement.
	if pc.HeapObjects < 1 || pc.HeapObjects > 500 {
		t.Errorf("heap objects per idle connection: %v", pc.HeapObjects)
	}
	for name, v := range map[string]float64{"rss": pc.RSS, "rss_scavenged": pc.RSSScavenged, "heap": pc.HeapInuse, "slab": pc.SlabBytes} {
		if math.IsNaN(v) || math.Abs(v) > 1<<20 {
			t.Errorf("%s per idle connection: %v", name, v)
		}
	}
	if b := r.Burst; b.Conns != 100 || b.Seconds <= 0 || b.Seconds > 30 || b.ClientS <= 0 || b.ConnsPerS <= 0 || b.SinkS <= 0 || b.SinkS > b.Seconds {
		t.Errorf("burst %+v", b)
	}
	for _, a := range []*IdleActive{r.Without, r.With} {
		if a == nil {
			t.Fatal("an active phase is missing")
		}
		if !a.Verified || a.Sources != 4 || a.Bytes == 0 || a.CPUSPerGiB <= 0 || a.DurationS < 0.5 || a.DurationS > 30 {
			t.Errorf("active phase beside %d idle: %+v", a.Idle, a)
		}
	}
	if r.Without.Idle != 0 || r.With.Idle != 200 || r.CPURatio <= 0 {
		t.Errorf("phases beside %d and %d idle, ratio %v", r.Without.Idle, r.With.Idle, r.CPURatio)
	}
	if r.CloseS <= 0 || r.CloseS > float64(idleCloseTimeout/time.Second) {
		t.Errorf("close_s %v", r.CloseS)
	}
	if len(rep.Targets) == 0 {
		t.Error("no targets judged")
	}
}

// readIdleReport reads the JSON report `idle --json` wrote.
func readIdleReport(t *testing.T, path string) IdleReport {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep IdleReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
