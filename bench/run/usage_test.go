package run

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/sink"
)

// TestUsageOver: the CPU and bytes over an interval are interpolated
// between the samples around each end, and an interval the samples do
// not cover, or too short to read from them, is refused.
func TestUsageOver(t *testing.T) {
	ms := int64(time.Millisecond)
	// 1 ms of CPU and 1,000 bytes per ms for the first second, then
	// 3 ms and 500 bytes per ms.
	var us []harness.UsageSample
	for i := int64(0); i <= 20; i++ {
		at := i * 100 * ms
		cpu, bytes := at, uint64(i*100_000)
		if i > 10 {
			cpu = 1000*ms + (i-10)*300*ms
			bytes = 1_000_000 + uint64(i-10)*50_000
		}
		us = append(us, harness.UsageSample{UnixNs: 1e12 + at, CPUNs: cpu, Bytes: bytes})
	}
	cases := []struct {
		name     string
		a, b     int64 // ms after the first sample
		cpuMs    float64
		bytes    uint64
		ok       bool
		tolBytes float64
	}{
		{"on samples", 200, 800, 600, 600_000, true, 0},
		{"between samples", 250, 850, 600, 600_000, true, 1},
		{"across the change", 950, 1250, 50 + 750, 50_000 + 125_000, true, 1},
		{"whole", 0, 2000, 4000, 1_500_000, true, 0},
		{"before the first sample", -50, 1000, 0, 0, false, 0},
		{"after the last sample", 1000, 2050, 0, 0, false, 0},
		{"shorter than two periods", 500, 650, 0, 0, false, 0},
		{"backwards", 800, 200, 0, 0, false, 0},
	}
	for _, c := range cases {
		cpu, bytes, ok := harness.UsageOver(us, 1e12+c.a*ms, 1e12+c.b*ms)
		if ok != c.ok {
			t.Errorf("%s: ok %v, want %v", c.name, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if got := float64(cpu) / float64(ms); math.Abs(got-c.cpuMs) > 1e-6 {
			t.Errorf("%s: CPU %.6f ms, want %.0f", c.name, got, c.cpuMs)
		}
		if d := math.Abs(float64(bytes) - float64(c.bytes)); d > c.tolBytes {
			t.Errorf("%s: %d bytes, want %d", c.name, bytes, c.bytes)
		}
	}
	if _, _, ok := harness.UsageOver(us[:1], 1e12, 1e12+500*ms); ok {
		t.Error("one sample gave an interval")
	}
}

// TestSendingWindow: the window while every stream sent runs from the
// latest first byte to the earliest last one; with a share, the outer
// streams are left out.
func TestSendingWindow(t *testing.T) {
	var ss []sink.SinkStream
	for i := int64(0); i < 10; i++ {
		ss = append(ss, sink.SinkStream{Bytes: 1, FirstNs: 100 + i, LastNs: 1000 - i})
	}
	ss = append(ss, sink.SinkStream{Bytes: 0, FirstNs: 0, LastNs: 0}) // sent nothing: not counted
	if a, b := sendingWindow(ss, 1); a != 109 || b != 991 {
		t.Errorf("all sending: [%d, %d], want [109, 991]", a, b)
	}
	if a, b := sendingWindow(ss, 0.8); a != 108 || b != 992 {
		t.Errorf("80%% sending: [%d, %d], want [108, 992]", a, b)
	}
	if a, b := sendingWindow(nil, 1); b > a {
		t.Errorf("no streams: [%d, %d]", a, b)
	}
}

// TestFioResultCPUOverTheWindow: a fio row's CPU per GiB is taken over
// the interval its throughput is, from the sink's usage samples, so a
// ramp that cost CPU for few bytes does not count; without samples it is
// the whole time listened.
func TestFioResultCPUOverTheWindow(t *testing.T) {
	const gib = 1 << 30
	ms := int64(time.Millisecond)
	t0 := int64(1e12)
	// Two streams: the second starts 1 s late, both end at 5 s. The
	// ramp costs 1 CPU-second for 0.1 GiB; the steady 4 s cost 0.2 s per
	// 0.5 GiB.
	var us []harness.UsageSample
	for i := int64(0); i <= 50; i++ {
		at := i * 100 * ms
		cpu, bytes := i*100*ms, uint64(i)*gib/100
		if i > 10 {
			cpu = 1000*ms + (i-10)*20*ms
			bytes = gib/10 + uint64(i-10)*gib/80
		}
		us = append(us, harness.UsageSample{UnixNs: t0 + at, CPUNs: cpu, Bytes: bytes})
	}
	last := us[len(us)-1]
	sr := &sink.SinkReport{Sources: 2, Bytes: last.Bytes, DurationS: 5, WallS: 5, CPUS: float64(last.CPUNs) / 1e9,
		Streams: []sink.SinkStream{
			{Bytes: last.Bytes / 2, FirstNs: t0, LastNs: t0 + 5000*ms},
			{Bytes: last.Bytes / 2, FirstNs: t0 + 1000*ms, LastNs: t0 + 5000*ms},
		}, Usage: us}
	sr.CPUSPerGiB = bench.CPUPerGiB(sr.CPUS, sr.Bytes)
	sr.SteadyS, sr.SteadyBps = 4, float64(last.Bytes-gib/10)/4
	r := fioResult("uring", 0, RunConfig{Sources: 2}, sr, &load.FioReport{}, 1, 5, 1, 1)
	if r.CPUOver != bench.ThroughputAllSending || r.ThroughputOver != bench.ThroughputAllSending {
		t.Fatalf("CPU over %q, throughput over %q, want %q", r.CPUOver, r.ThroughputOver, bench.ThroughputAllSending)
	}
	if want := 0.8 / 0.5; math.Abs(r.CPUSPerGiB-want) > 1e-9 {
		t.Errorf("%.6f CPU-s/GiB over the window, want %.3f", r.CPUSPerGiB, want)
	}
	if math.Abs(r.CPUSPerGiBListened-sr.CPUSPerGiB) > 1e-12 {
		t.Errorf("%.6f CPU-s/GiB listened, want the sink's %.6f", r.CPUSPerGiBListened, sr.CPUSPerGiB)
	}
	sr.Usage = nil
	r = fioResult("uring", 0, RunConfig{Sources: 2}, sr, &load.FioReport{}, 1, 5, 1, 1)
	if r.CPUOver != bench.CPUOverListened || r.CPUSPerGiB != sr.CPUSPerGiB {
		t.Errorf("without samples: CPU over %q, %.3f CPU-s/GiB, want %q and %.3f", r.CPUOver, r.CPUSPerGiB, bench.CPUOverListened, sr.CPUSPerGiB)
	}
}

// TestAppendUsageThins: past MaxUsageSamples the samples are thinned to
// every other one, keeping the first and the latest, and stay in order.
func TestAppendUsageThins(t *testing.T) {
	var us []harness.UsageSample
	n := harness.MaxUsageSamples + 10
	for i := range n {
		us = harness.AppendUsage(us, harness.UsageSample{UnixNs: int64(i), CPUNs: int64(i), Bytes: uint64(i)})
	}
	if len(us) > harness.MaxUsageSamples {
		t.Fatalf("%d samples, want at most %d", len(us), harness.MaxUsageSamples)
	}
	if us[0].UnixNs != 0 || us[len(us)-1].UnixNs != int64(n-1) {
		t.Errorf("first %d, last %d; want 0 and %d", us[0].UnixNs, us[len(us)-1].UnixNs, n-1)
	}
	for i := 1; i < len(us); i++ {
		if us[i].UnixNs <= us[i-1].UnixNs {
			t.Fatalf("samples %d and %d out of order: %d, %d", i-1, i, us[i-1].UnixNs, us[i].UnixNs)
		}
	}
}
