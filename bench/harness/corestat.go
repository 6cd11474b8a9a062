package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// ClockTicks is the kernel's USER_HZ, the unit of /proc/stat's and
// /proc/PID/stat's times: 100 on every Linux architecture Go supports.
const ClockTicks = 100

// CPUTimes is one CPU's line of /proc/stat: the time it spent in each
// state since boot, in clock ticks (USER_HZ).
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Busy is the time the CPU did work: user, nice, system, irq and softirq.
// Idle and iowait are time it had nothing to run; steal is time the
// hypervisor ran something else, which is no one's work here.
func (t CPUTimes) Busy() uint64 { return t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ }

// ParseProcStat reads the per-CPU lines ("cpuN ...") of /proc/stat, by
// CPU number. The aggregate "cpu" line and every other line are skipped.
func ParseProcStat(b []byte) (map[int]CPUTimes, error) {
	out := map[int]CPUTimes{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 || !bytes.HasPrefix(f[0], []byte("cpu")) || len(f[0]) == 3 {
			continue
		}
		cpu, err := strconv.Atoi(string(f[0][3:]))
		if err != nil {
			continue
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// kernels before 2.6.11 stop after softirq.
		if len(f) < 8 {
			return nil, fmt.Errorf("bench: /proc/stat: %s: %d fields, want at least 7", f[0], len(f)-1)
		}
		var v [8]uint64
		for i := range v {
			if i+1 >= len(f) {
				break
			}
			n, err := strconv.ParseUint(string(f[i+1]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bench: /proc/stat: %s: %w", f[0], err)
			}
			v[i] = n
		}
		out[cpu] = CPUTimes{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: /proc/stat: no per-CPU lines")
	}
	return out, nil
}

// CoreSample is the busy time of the sink's and the load's CPUs at one
// moment, summed over each side's CPUs, in clock ticks.
type CoreSample struct {
	UnixNs   int64
	SinkBusy uint64
	SinkSoft uint64 // the softirq part of SinkBusy
	LoadBusy uint64
}

// SampleOf sums the busy and softirq times of each side's CPUs in st.
func SampleOf(st map[int]CPUTimes, at time.Time, sink, load []int) CoreSample {
	s := CoreSample{UnixNs: at.UnixNano()}
	for _, c := range sink {
		s.SinkBusy += st[c].Busy()
		s.SinkSoft += st[c].SoftIRQ
	}
	for _, c := range load {
		s.LoadBusy += st[c].Busy()
	}
	return s
}

// CoreUse is what each side's CPUs did over an interval, in seconds.
type CoreUse struct {
	Seconds float64 // the interval's length
	Sink    float64 // the sink's CPUs busy
	Soft    float64 // of which softirq
	Load    float64 // the load's CPUs busy
}

// CoreBetween is the use between two samples. A counter that went
// backwards (a CPU taken offline and back) gives zero for that side.
func CoreBetween(a, b CoreSample) CoreUse {
	tick := func(x, y uint64) float64 {
		if y < x {
			return 0
		}
		return float64(y-x) / ClockTicks
	}
	return CoreUse{Seconds: time.Duration(b.UnixNs - a.UnixNs).Seconds(),
		Sink: tick(a.SinkBusy, b.SinkBusy), Soft: tick(a.SinkSoft, b.SinkSoft), Load: tick(a.LoadBusy, b.LoadBusy)}
}

// coreAt interpolates the counters at t between the samples around it;
// ss are in time order and cover t.
func coreAt(ss []CoreSample, t int64) (sink, soft, load float64) {
	i := 0
	for i < len(ss)-1 && ss[i+1].UnixNs <= t {
		i++
	}
	lo := ss[i]
	if i == len(ss)-1 || lo.UnixNs == t {
		return float64(lo.SinkBusy), float64(lo.SinkSoft), float64(lo.LoadBusy)
	}
	hi := ss[i+1]
	f := float64(t-lo.UnixNs) / float64(hi.UnixNs-lo.UnixNs)
	lerp := func(x, y uint64) float64 { return float64(x) + f*(float64(y)-float64(x)) }
	return lerp(lo.SinkBusy, hi.SinkBusy), lerp(lo.SinkSoft, hi.SinkSoft), lerp(lo.LoadBusy, hi.LoadBusy)
}

// CoreOver is the use between a and b (UnixNano), each end interpolated
// between the samples around it; false when the samples do not cover
// [a, b].
func CoreOver(ss []CoreSample, a, b int64) (CoreUse, bool) {
	if len(ss) < 2 || b <= a || a < ss[0].UnixNs || b > ss[len(ss)-1].UnixNs {
		return CoreUse{}, false
	}
	sa, fa, la := coreAt(ss, a)
	sb, fb, lb := coreAt(ss, b)
	d := func(x, y float64) float64 { return max(y-x, 0) / ClockTicks }
	return CoreUse{Seconds: time.Duration(b - a).Seconds(), Sink: d(sa, sb), Soft: d(fa, fb), Load: d(la, lb)}, true
}

// coreSampler samples the sink's and the load's CPUs every
// UsageSampleEvery, for the rows whose interval is known only afterwards
// (fio's, from the sink's own samples).
type coreSampler struct {
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	samples []CoreSample
}

// StartCoreSampler starts sampling; with no sink CPUs it samples nothing.
func StartCoreSampler(sink, load []int) *coreSampler {
	s := &coreSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(UsageSampleEvery)
		defer t.Stop()
		for {
			if c, ok := ReadCores(sink, load); ok {
				s.samples = append(s.samples, c)
			}
			select {
			case <-t.C:
			case <-s.stop:
				if c, ok := ReadCores(sink, load); ok {
					s.samples = append(s.samples, c)
				}
				return
			}
		}
	}()
	return s
}

// Finish stops sampling and returns the samples, in time order. It may be
// called more than once.
func (s *coreSampler) Finish() []CoreSample {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return s.samples
}
