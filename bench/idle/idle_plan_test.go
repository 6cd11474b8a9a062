package idle

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestIdleTableSlots(t *testing.T) {
	for _, tt := range []struct {
		flag int
		soft uint64
		want int
	}{
		{0, 20000, 20000},
		{0, 100000, 65536},
		{0, 1 << 62, 65536}, // an unlimited soft limit
		{-1, 20000, 0},
		{5000, 20000, 5000},
		{30000, 20000, 20000}, // the kernel caps it at the soft limit
	} {
		if got := idleTableSlots(tt.flag, tt.soft); got != tt.want {
			t.Errorf("idleTableSlots(%d, %d) = %d, want %d", tt.flag, tt.soft, got, tt.want)
		}
	}
}

func TestIdleSinkNeed(t *testing.T) {
	for _, tt := range []struct {
		runner                string
		conns, workers, slots int
		want                  uint64
	}{
		{"epoll", 101000, 1, 0, 101512},
		{"goroutine", 11000, 8, 0, 11512},
		{"uring", 101000, 5, 20000, 1512},   // 1,000 beyond the tables
		{"uring", 101000, 1, 20000, 81512},  // 81,000 beyond
		{"uring", 101000, 8, 65536, 512},    // all in the tables
		{"uring", 101000, 2, 0, 101512},     // --file-slots -1
		{"epoll", 101000, 8, 65536, 101512}, // tables are uring's alone
	} {
		if got := idleSinkNeed(tt.runner, tt.conns, tt.workers, tt.slots); got != tt.want {
			t.Errorf("%s, %d connections, %d workers of %d slots: need %d, want %d", tt.runner, tt.conns, tt.workers, tt.slots, got, tt.want)
		}
		// idleSinkMost inverts it: the most a sink holds under a hard
		// limit of exactly the need is the connections asked for.
		if most := idleSinkMost(tt.runner, tt.workers, tt.slots, tt.want); most < tt.conns {
			t.Errorf("%s: under a hard limit of %d the sink holds %d, below %d", tt.runner, tt.want, most, tt.conns)
		}
	}
	if got := idleURingWorkers(101000, 20000, 20000); got != 5 {
		t.Errorf("uring workers for 101,000 under 20,000: %d, want 5", got)
	}
	if got := idleURingWorkers(10000, 20000, 20000); got != 1 {
		t.Errorf("uring workers for 10,000 under 20,000: %d, want 1", got)
	}
	if got := idleURingWorkers(101000, 0, 20000); got != 0 {
		t.Errorf("uring workers without tables: %d, want 0", got)
	}
	if got := idleURingWorkers(100_000_000, 10, 20000); got != 0 {
		t.Errorf("uring workers beyond the engine's most: %d, want 0", got)
	}
}

// TestIdleShare checks the spread over client processes: at every level
// the clients together hold the plan's first connections, none more than
// one above another, and no (source, listener) pair carries more than
// one client would put on it.
func TestIdleShare(t *testing.T) {
	for procs := 1; procs <= 7; procs++ {
		prev := make([]int, procs)
		for n := 0; n <= 60; n++ {
			sum, lo, hi := 0, n, 0
			for i := range procs {
				s := idleShare(n, i, procs)
				if s < prev[i] {
					t.Fatalf("%d clients: client %d holds %d at %d, fewer than %d before", procs, i, s, n, prev[i])
				}
				prev[i] = s
				sum += s
				lo, hi = min(lo, s), max(hi, s)
			}
			if sum != n || hi-lo > 1 {
				t.Fatalf("%d clients at %d: sum %d, shares from %d to %d", procs, n, sum, lo, hi)
			}
		}
	}
	// The default plan at 100,000 under a hard limit of 20,000: six
	// clients over 4 sources x 4 listeners.
	c := DefaultIdleConfig()
	top := c.Idle[len(c.Idle)-1]
	procs := idleClientProcs(top, 20000-idleFDMargin)
	if procs != 6 {
		t.Fatalf("100,000 over clients of 19,488: %d processes, want 6", procs)
	}
	for _, n := range []int{10000, 55555, top} {
		seen := make([]bool, n)
		perPair := map[[2]int]int{}
		for i := range procs {
			share := idleShare(n, i, procs)
			if share > 20000-idleFDMargin {
				t.Errorf("client %d holds %d", i, share)
			}
			for k := range share {
				g := i + k*procs // as idleConns.dial numbers them
				if g >= n || seen[g] {
					t.Fatalf("level %d: client %d's connection %d is the plan's %d", n, i, k, g)
				}
				seen[g] = true
				src, dst := idlePair(g, c.sourceAddrs(), c.Listeners)
				perPair[[2]int{src, dst}]++
			}
		}
		want := (n + 15) / 16
		for p, m := range perPair {
			if m > want {
				t.Errorf("level %d: pair %v carries %d, above %d", n, p, m, want)
			}
		}
		if len(perPair) != 16 {
			t.Errorf("level %d: %d pairs used, want 16", n, len(perPair))
		}
	}
}

func TestIdleClientConns(t *testing.T) {
	c := DefaultIdleConfig()
	if per, err := c.idleClientConns(20000); err != nil || per != 19488 {
		t.Errorf("under 20,000: %d, %v; want 19,488", per, err)
	}
	if per, err := c.idleClientConns(1 << 63); err != nil || per != idleNoFileCap-idleFDMargin {
		t.Errorf("unlimited: %d, %v", per, err)
	}
	if _, err := c.idleClientConns(400); err == nil || !strings.Contains(err.Error(), "ulimit -Hn") {
		t.Errorf("under 400: %v, want an error", err)
	}
	c.ClientConns = 80
	if per, err := c.idleClientConns(20000); err != nil || per != 80 {
		t.Errorf("--client-conns 80: %d, %v", per, err)
	}
	c.ClientConns = 19489
	if _, err := c.idleClientConns(20000); err == nil || !strings.Contains(err.Error(), "--client-conns 19489") {
		t.Errorf("--client-conns above the room: %v", err)
	}
	if got := idleClientProcs(10000, 19488); got != 1 {
		t.Errorf("10,000: %d clients", got)
	}
	if got := idleClientProcs(0, 19488); got != 1 {
		t.Errorf("none: %d clients", got)
	}
}

func TestIdlePlan(t *testing.T) {
	explicit := func(levels ...int) func(*IdleConfig) {
		return func(c *IdleConfig) { c.Idle, c.CapLevels = levels, false }
	}
	for _, tt := range []struct {
		name    string
		edit    func(*IdleConfig)
		runner  string
		workers int
		hard    uint64
		// A plan: its levels, sink need and soft limit, clients and
		// table; or an error with these substrings.
		levels  []int
		need    uint64
		soft    uint64
		clients int
		slots   int
		capped  []string
		errs    []string
	}{
		{name: "epoll beyond the limit, levels asked for", runner: "epoll", workers: 1, hard: 20000,
			edit: func(c *IdleConfig) { explicit(5000, 30000)(c); c.Active = 100 },
			errs: []string{"--idle 30000 needs 30,612 descriptors for the epoll runner with --active 100 but the hard limit is 20,000",
				"measure epoll at --idle 5000,19000, run uring, or raise the hard limit (as root: ulimit -Hn 30612)"}},
		{name: "epoll at the default levels", runner: "epoll", workers: 1, hard: 20000,
			levels: []int{10000, 18000}, need: 19512, soft: 19512, clients: 1,
			capped: []string{"measured up to 18,000 idle", "--idle 100000 needs 101,512 descriptors for the epoll runner with --active 1000",
				"run uring with --workers 5"}},
		{name: "uring of one worker at the default levels", runner: "uring", workers: 1, hard: 20000,
			levels: []int{10000, 38000}, need: 19512, soft: 20000, clients: 2, slots: 20000,
			capped: []string{"measured up to 38,000 idle", "--idle 100000 needs 81,512 descriptors for the uring runner (81,000 beyond its worker's file table of 20,000 slots)",
				"run uring with --workers 5"}},
		{name: "uring of five workers at the default levels", runner: "uring", workers: 5, hard: 20000,
			levels: []int{10000, 100000}, need: 1512, soft: 20000, clients: 6, slots: 20000},
		{name: "uring of two workers, levels asked for", runner: "uring", workers: 2, hard: 20000,
			edit:   func(c *IdleConfig) { explicit(5000, 15000)(c); c.Active = 100 },
			levels: []int{5000, 15000}, need: 512, soft: 20000, clients: 1, slots: 20000},
		{name: "uring without tables", runner: "uring", workers: 2, hard: 20000,
			edit: func(c *IdleConfig) { explicit(5000, 30000)(c); c.Active = 100; c.Engine.FileSlots = -1 },
			errs: []string{"(no file tables: --file-slots -1)", "run uring without --file-slots"}},
		{name: "uring with small tables", runner: "uring", workers: 2, hard: 20000,
			edit:   func(c *IdleConfig) { explicit(5000, 30000)(c); c.Active = 100; c.Engine.FileSlots = 8000 },
			levels: []int{5000, 30000}, need: 14612, soft: 20000, clients: 2, slots: 8000},
		{name: "not even the first level", runner: "goroutine", workers: 1, hard: 5000,
			errs: []string{"--idle 100000 needs 101,512 descriptors for the goroutine runner", "measure goroutine at --idle 3000"}},
		{name: "a hard limit that holds everything", runner: "epoll", workers: 1, hard: 1 << 20,
			levels: []int{10000, 100000}, need: 101512, soft: 101512, clients: 1},
		{name: "clients of 80", runner: "epoll", workers: 1, hard: 20000,
			edit:   func(c *IdleConfig) { explicit(100, 200)(c); c.Active = 4; c.ClientConns = 80 },
			levels: []int{100, 200}, need: 716, soft: 716, clients: 3},
	} {
		c := DefaultIdleConfig()
		if tt.edit != nil {
			tt.edit(&c)
		}
		per, err := c.idleClientConns(tt.hard)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		p, err := c.plan(tt.runner, tt.workers, tt.hard, per)
		if len(tt.errs) > 0 {
			if err == nil {
				t.Errorf("%s: plan %v, want an error", tt.name, p)
				continue
			}
			for _, want := range tt.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %q lacks %q", tt.name, err, want)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !slices.Equal(p.Levels, tt.levels) || p.Need != tt.need || p.Soft != tt.soft || p.Clients != tt.clients || p.Slots != tt.slots {
			t.Errorf("%s: levels %v need %d soft %d clients %d slots %d; want %v, %d, %d, %d, %d",
				tt.name, p.Levels, p.Need, p.Soft, p.Clients, p.Slots, tt.levels, tt.need, tt.soft, tt.clients, tt.slots)
		}
		if p.Need > tt.hard || p.PerClient > per || p.PerClient*p.Clients < p.top() {
			t.Errorf("%s: need %d, %d clients of %d for %d", tt.name, p.Need, p.Clients, p.PerClient, p.top())
		}
		if (p.Capped != "") != (len(tt.capped) > 0) {
			t.Errorf("%s: capped %q", tt.name, p.Capped)
		}
		for _, want := range tt.capped {
			if !strings.Contains(p.Capped, want) {
				t.Errorf("%s: %q lacks %q", tt.name, p.Capped, want)
			}
		}
		// A capped run measures the levels that fit: it does not say so
		// as a fix.
		if strings.Contains(p.Capped, "measure "+tt.runner+" at") {
			t.Errorf("%s: %q", tt.name, p.Capped)
		}
	}
}

func TestIdlePlanRunners(t *testing.T) {
	c := DefaultIdleConfig()
	c.Engine.Workers = 1
	plans, skipped, err := c.planRunners([]string{"uring", "epoll", "goroutine"}, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 3 || len(skipped) != 0 || plans[0].top() != 38000 || plans[1].top() != 18000 || plans[2].Capped == "" {
		t.Errorf("default levels, one worker: plans %v, skipped %v", plans, skipped)
	}
	// Below the first level: skipped, unless none is left.
	if plans, skipped, err = c.planRunners([]string{"uring", "epoll"}, 6000); err != nil || len(plans) != 1 || len(skipped) != 1 || skipped[0].Runner != "epoll" {
		t.Errorf("under 6,000: plans %v, skipped %v, %v", plans, skipped, err)
	}
	if _, _, err = c.planRunners([]string{"epoll"}, 6000); err == nil || !strings.Contains(err.Error(), "no runner") {
		t.Errorf("epoll alone under 6,000: %v", err)
	}
	// Levels asked for: every runner that cannot stops the command.
	c.Idle, c.CapLevels = CountList{5000, 30000}, false
	_, _, err = c.planRunners([]string{"uring", "epoll", "goroutine"}, 20000)
	if err == nil || !strings.Contains(err.Error(), "for the epoll runner") || !strings.Contains(err.Error(), "for the goroutine runner") ||
		strings.Contains(err.Error(), "for the uring runner") {
		t.Errorf("levels asked for: %v", err)
	}
	// Too many client processes.
	c.Idle = CountList{100000}
	if _, _, err = c.planRunners([]string{"uring"}, 1000); err == nil || !strings.Contains(err.Error(), "client processes") {
		t.Errorf("a hard limit of 1,000: %v", err)
	}
}

func TestIdleLevelsFlag(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		levels []int
		capped bool
		slots  int
	}{
		{nil, defaultIdleLevels, true, 0},
		{[]string{"--idle", "5k,30k", "--file-slots", "-1"}, []int{5000, 30000}, false, -1},
		{[]string{"--file-slots", "4096"}, defaultIdleLevels, true, 4096},
	} {
		c := DefaultIdleConfig()
		fs := flag.NewFlagSet("idle", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if !slices.Equal(c.Idle, tt.levels) || c.CapLevels != tt.capped || c.Engine.FileSlots != tt.slots {
			t.Errorf("%v: levels %v, capped %v, file slots %d", tt.args, c.Idle, c.CapLevels, c.Engine.FileSlots)
		}
	}
}

func TestClientsNoFile(t *testing.T) {
	a := NoFileLimit{Need: 17179, SoftBefore: 20000, HardBefore: 20000, Soft: 20000, Hard: 20000}
	b := a
	b.Need = 17178
	if got := clientsNoFile([]NoFileLimit{a}); got != "20000 (enough for 17179)" {
		t.Errorf("one: %q", got)
	}
	want := "clients 1-2: 20000 (enough for 17179); client 3: 20000 (enough for 17178)"
	if got := clientsNoFile([]NoFileLimit{a, a, b}); got != want {
		t.Errorf("three: %q, want %q", got, want)
	}
	if got := plural(6, "idle client process"); got != "6 idle client processes" {
		t.Errorf("plural: %q", got)
	}
}
