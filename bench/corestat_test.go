package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
)

const procStatSample = `cpu  4220 0 1727 20456 59 0 16 8 0 0
cpu0 1986 3 852 10391 10 7 5 2 0 0
cpu1 2233 0 874 10065 48 0 11 5 0 0
intr 123 0 0
ctxt 456
btime 1764000000
processes 789
procs_running 2
procs_blocked 0
softirq 100 0 50 0 50 0 0 0 0 0 0
`

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[int]harness.CPUTimes
		wantErr bool
	}{
		{"two CPUs", procStatSample, map[int]harness.CPUTimes{
			0: {User: 1986, Nice: 3, System: 852, Idle: 10391, IOWait: 10, IRQ: 7, SoftIRQ: 5, Steal: 2},
			1: {User: 2233, System: 874, Idle: 10065, IOWait: 48, SoftIRQ: 11, Steal: 5},
		}, false},
		{"no steal field (old kernels)", "cpu 1 2 3 4 5 6 7\ncpu3 1 2 3 4 5 6 7\n",
			map[int]harness.CPUTimes{3: {User: 1, Nice: 2, System: 3, Idle: 4, IOWait: 5, IRQ: 6, SoftIRQ: 7}}, false},
		{"a CPU line too short", "cpu0 1 2 3\n", nil, true},
		{"not a number", "cpu0 1 2 3 x 5 6 7 8\n", nil, true},
		{"no CPU lines", "intr 1\nctxt 2\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := harness.ParseProcStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d CPUs %v, want %d", len(got), got, len(tt.want))
			}
			for cpu, w := range tt.want {
				if got[cpu] != w {
					t.Errorf("cpu%d: got %+v, want %+v", cpu, got[cpu], w)
				}
			}
		})
	}
}

func TestCoreBusy(t *testing.T) {
	st, err := harness.ParseProcStat([]byte(procStatSample))
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq: idle, iowait and steal are nobody's
	// work here.
	if b := st[0].Busy(); b != 1986+3+852+7+5 {
		t.Errorf("cpu0 busy %d", b)
	}
	t0 := time.Unix(100, 0)
	a := harness.SampleOf(st, t0, []int{0}, []int{1})
	if a.SinkBusy != 2853 || a.SinkSoft != 5 || a.LoadBusy != 2233+874+11 {
		t.Fatalf("sample %+v", a)
	}
	tests := []struct {
		name string
		a, b harness.CoreSample
		want harness.CoreUse
	}{
		{"a busy second", harness.CoreSample{UnixNs: 0, SinkBusy: 1000, SinkSoft: 100, LoadBusy: 500},
			harness.CoreSample{UnixNs: 2e9, SinkBusy: 1150, SinkSoft: 140, LoadBusy: 690},
			harness.CoreUse{Seconds: 2, Sink: 1.5, Soft: 0.4, Load: 1.9}},
		{"idle", harness.CoreSample{UnixNs: 0, SinkBusy: 7, SinkSoft: 1, LoadBusy: 9},
			harness.CoreSample{UnixNs: 1e9, SinkBusy: 7, SinkSoft: 1, LoadBusy: 9},
			harness.CoreUse{Seconds: 1}},
		{"a counter going backwards counts nothing", harness.CoreSample{UnixNs: 0, SinkBusy: 500, SinkSoft: 10, LoadBusy: 500},
			harness.CoreSample{UnixNs: 1e9, SinkBusy: 400, SinkSoft: 20, LoadBusy: 600},
			harness.CoreUse{Seconds: 1, Sink: 0, Soft: 0.1, Load: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := harness.CoreBetween(tt.a, tt.b); !closeUse(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCoreOver(t *testing.T) {
	// A core 80% busy (of which a quarter softirq) and a load core 50%
	// busy, sampled every 100 ms.
	var ss []harness.CoreSample
	for i := range 11 {
		ss = append(ss, harness.CoreSample{UnixNs: int64(i) * 1e8, SinkBusy: uint64(8 * i), SinkSoft: uint64(2 * i), LoadBusy: uint64(5 * i)})
	}
	tests := []struct {
		name string
		a, b int64
		want harness.CoreUse
		ok   bool
	}{
		{"on samples", 1e8, 9e8, harness.CoreUse{Seconds: 0.8, Sink: 0.64, Soft: 0.16, Load: 0.4}, true},
		{"between samples", 1.5e8, 6.5e8, harness.CoreUse{Seconds: 0.5, Sink: 0.4, Soft: 0.1, Load: 0.25}, true},
		{"the whole", 0, 1e9, harness.CoreUse{Seconds: 1, Sink: 0.8, Soft: 0.2, Load: 0.5}, true},
		{"before the first", -1, 5e8, harness.CoreUse{}, false},
		{"after the last", 5e8, 1e9 + 1, harness.CoreUse{}, false},
		{"empty", 5e8, 5e8, harness.CoreUse{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := harness.CoreOver(ss, tt.a, tt.b)
			if ok != tt.ok || !closeUse(got, tt.want) {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestApplyCore(t *testing.T) {
	var r Result
	ApplyCore(&r, harness.CoreUse{Seconds: 2, Sink: 1.5, Soft: 0.5, Load: 1}, 3*Gibibyte, 1, 1)
	want := Result{CoreCPUS: 1.5, CoreSoftirqS: 0.5, LoadCoreCPUS: 1, CoreCPUSPerGiB: 0.5, CoreSoftirqSPerGiB: 0.5 / 3,
		LoadCoreCPUSPerGiB: 1.0 / 3, CoreUtil: 0.75, LoadCoreUtil: 0.5}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"core_cpu_s", r.CoreCPUS, want.CoreCPUS}, {"core_softirq_s", r.CoreSoftirqS, want.CoreSoftirqS},
		{"load_core_cpu_s", r.LoadCoreCPUS, want.LoadCoreCPUS}, {"core_cpu_s_per_gib", r.CoreCPUSPerGiB, want.CoreCPUSPerGiB},
		{"core_softirq_s_per_gib", r.CoreSoftirqSPerGiB, want.CoreSoftirqSPerGiB},
		{"load_core_cpu_s_per_gib", r.LoadCoreCPUSPerGiB, want.LoadCoreCPUSPerGiB},
		{"core_util", r.CoreUtil, want.CoreUtil}, {"load_core_util", r.LoadCoreUtil, want.LoadCoreUtil},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s: %g, want %g", c.name, c.got, c.want)
		}
	}
}

func TestApplyCoreUtilAtMostOne(t *testing.T) {
	var r Result
	ApplyCore(&r, harness.CoreUse{Seconds: 1, Sink: 1.02, Load: 1.01}, Gibibyte, 1, 1)
	if r.CoreUtil != 1 || r.LoadCoreUtil != 1 || r.CoreCPUS != 1.02 {
		t.Errorf("util %v %v, core_cpu_s %v", r.CoreUtil, r.LoadCoreUtil, r.CoreCPUS)
	}
}

func TestCPUMask(t *testing.T) {
	tests := []struct {
		cpus []int
		want string
	}{
		{nil, "0"},
		{[]int{0}, "1"},
		{[]int{1}, "2"},
		{[]int{0, 1, 2, 3}, "f"},
		{[]int{4, 5}, "30"},
		{[]int{0, 32}, "1,00000001"},
		{[]int{33, 64}, "1,00000002,00000000"},
	}
	for _, tt := range tests {
		if got := harness.CPUMask(tt.cpus); got != tt.want {
			t.Errorf("cpuMask(%v) = %q, want %q", tt.cpus, got, tt.want)
		}
	}
}

func closeUse(a, b harness.CoreUse) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return near(a.Seconds, b.Seconds) && near(a.Sink, b.Sink) && near(a.Soft, b.Soft) && near(a.Load, b.Load)
}

func TestBusyNote(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    harness.CPUShare
		want string // "" for no note
	}{
		{"Quiet", harness.CPUShare{Seconds: 40, Others: 1.5}, ""},
		{"BuildBeside", harness.CPUShare{Seconds: 40, Others: 39}, "other processes used at least 39.0 CPU-s of 2 CPUs over the 40s run (0.97 CPUs"},
		{"NoInterval", harness.CPUShare{Others: 5}, ""},
	} {
		got := harness.BusyNote(tc.s, 2)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %+v: note %q, want %q", tc.name, tc.s, got, tc.want)
		}
	}
}
