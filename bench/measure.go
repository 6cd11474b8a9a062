package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
)

// Skipped is a runner that cannot work here.
type Skipped struct {
	Runner string `json:"runner"`
	Reason string `json:"reason"`
}

// AvailableRunners splits names into the runners the engine can start here
// and the ones it cannot, with the reason. It starts and stops a tiny
// engine per runner: building a runner is how the engine probes for it.
func AvailableRunners(names []string) (ok []string, skipped []Skipped) {
	for _, name := range names {
		e, err := engine.New(engine.Config{Runner: name, Buffers: 8, BufSize: 4096})
		if err != nil {
			skipped = append(skipped, Skipped{name, err.Error()})
			continue
		}
		chosen := e.Runner()
		ShutdownEngine(e)
		if chosen != name {
			skipped = append(skipped, Skipped{name, fmt.Sprintf("the engine chose %s instead (is %s set?)", chosen, engine.EnvRunner)})
			continue
		}
		ok = append(ok, name)
	}
	return ok, skipped
}

// PickRunners returns the runners of asked (of defaults, when asked is
// empty) that the engine can start here, and the others with the reason,
// which it also prints to w unless w is nil. It fails when none can.
func PickRunners(asked, defaults []string, w io.Writer) ([]string, []Skipped, error) {
	if len(asked) == 0 {
		asked = defaults
	}
	runners, skipped := AvailableRunners(asked)
	if w != nil {
		for _, s := range skipped {
			fmt.Fprintf(w, "sluice-bench: runner %s skipped: %s\n", s.Runner, s.Reason)
		}
	}
	if len(runners) == 0 {
		return nil, skipped, errors.New("bench: no runner can work here")
	}
	return runners, skipped, nil
}

// Pinning records how the engine and the generator were kept apart.
type Pinning struct {
	Enabled    bool   `json:"enabled"`
	EngineCPUs []int  `json:"engine_cpus,omitempty"`
	GenCPUs    []int  `json:"gen_cpus,omitempty"`
	Note       string `json:"note,omitempty"`
}

// PinApart confines this process (the engine) to the first half of the
// allowed CPUs, rounded up, and returns the rest for the generator, with a
// function that undoes it. With fewer than two CPUs, or off, it does
// nothing. GOMAXPROCS follows the engine's share.
func PinApart(enabled bool) (Pinning, func()) {
	cpus := harness.AllowedCPUs()
	if !enabled {
		return Pinning{Note: "disabled (--pin=false)"}, func() {}
	}
	if len(cpus) < 2 {
		return Pinning{Note: fmt.Sprintf("not possible with %d CPU", len(cpus))}, func() {}
	}
	k := (len(cpus) + 1) / 2
	eng, gen := cpus[:k], cpus[k:]
	if err := harness.PinProcess(eng); err != nil {
		return Pinning{Note: err.Error()}, func() {}
	}
	prev := runtime.GOMAXPROCS(len(eng))
	return Pinning{Enabled: true, EngineCPUs: eng, GenCPUs: gen}, func() {
		harness.PinProcess(cpus)
		runtime.GOMAXPROCS(prev)
	}
}

// Workload is one measurement's settings: an engine with one runner, fed
// over loopback TCP by the generator process.
type Workload struct {
	Runner   string
	Round    int
	Sources  int
	Duration time.Duration
	MsgSize  report.Size
	Rate     report.Rate // per source
	Arrivals string
	Pacing   string // the generator's; "" for DefaultPacing
	Skew     float64
	MaxDial  int
	Verify   bool
	Engine   harness.EngineFlags // Engine.Framing frames the generator's messages too
	Exe      string              // the sluice-bench binary, for `gen`
	GenCPUs  []int
	Profile  string // directory for a CPU profile, or ""
	Label    string // progress label
	// TLS, when set, puts the engine's listener and the generator on TLS
	// with these files (run --tls).
	TLS *harness.TLSFiles `json:",omitempty"`
	// Wire is how the load reaches the sink; its zero value is loopback
	// without whole-core accounting.
	Wire harness.WireEnv
}

// GenPacing is the generator's pacing in w.
func (w Workload) GenPacing() string {
	if w.Pacing == "" {
		return load.DefaultPacing
	}
	return w.Pacing
}

// Result is one runner's measurement. The JSON names are the report's
// schema (see the package documentation).
type Result struct {
	Runner        string  `json:"runner"`
	Round         int     `json:"round"`
	Sources       int     `json:"sources"`
	Bytes         uint64  `json:"bytes"`
	DurationS     float64 `json:"duration_s"`
	ThroughputBps float64 `json:"throughput_bps"`
	// ThroughputOver says, for a fio row, over which interval the
	// throughput was measured (ThroughputAllSending and friends).
	ThroughputOver string  `json:"throughput_over,omitempty"`
	CPUS           float64 `json:"cpu_s"`
	CPUSPerGiB     float64 `json:"cpu_s_per_gib"`
	// CPUOver says, for a fio row, over which interval cpu_s_per_gib was
	// measured: the throughput's (ThroughputOver) when the sink's usage
	// samples cover it, else CPUOverListened; CPUSPerGiBListened is the
	// figure over the whole time the sink listened (cpu_s over bytes).
	CPUOver            string  `json:"cpu_over,omitempty"`
	CPUSPerGiBListened float64 `json:"cpu_s_per_gib_listened,omitempty"`
	// Wire is the wire the load crossed: WireVeth or WireLoopback.
	Wire string `json:"wire,omitempty"`
	// The receiving core's whole busy time over the same interval as
	// cpu_s: user, nice, system, irq and softirq of the sink's CPUs from
	// /proc/stat, whoever ran there (the sink, the kernel's receive work
	// for it, and on loopback the sender's transmit that a window update
	// hands it). core_softirq_s is its softirq part. load_core_cpu_s is
	// the same for the load's CPUs. Zero when the sides were not pinned.
	CoreCPUS           float64 `json:"core_cpu_s"`
	CoreCPUSPerGiB     float64 `json:"core_cpu_s_per_gib"`
	CoreSoftirqS       float64 `json:"core_softirq_s"`
	CoreSoftirqSPerGiB float64 `json:"core_softirq_s_per_gib"`
	CoreUtil           float64 `json:"core_util"`
	LoadCoreCPUS       float64 `json:"load_core_cpu_s"`
	LoadCoreCPUSPerGiB float64 `json:"load_core_cpu_s_per_gib"`
	LoadCoreUtil       float64 `json:"load_core_util"`
	ThreadsMax         int     `json:"threads_max"`
	RSSMaxBytes        int64   `json:"rss_max_bytes"`
	// LatencyNs is engine latency: delivery minus the time the generator
	// actually wrote the message. E2ELatencyNs is delivery minus the
	// message's scheduled time, so that a generator falling behind stays
	// visible (no coordinated omission).
	LatencyNs    report.Latency `json:"latency_ns"`
	E2ELatencyNs report.Latency `json:"e2e_latency_ns"`
	FairnessJain float64        `json:"fairness_jain"`
	// With --framing: the whole records delivered, and records_per_s
	// over the interval; those too long to deliver (records_skipped,
	// none when the generator's records fit), and the bytes of records a
	// stream ended inside (truncated_bytes, none when the generator could
	// finish its last records). All 0 for raw bytes.
	Records        uint64         `json:"records"`
	RecordsPerS    float64        `json:"records_per_s"`
	RecordsSkipped uint64         `json:"records_skipped"`
	TruncatedBytes uint64         `json:"truncated_bytes"`
	PoolWaits      uint64         `json:"pool_waits"`
	PartialFlushes uint64         `json:"partial_flushes"`
	Chunks         uint64         `json:"chunks"`
	Errors         uint64         `json:"errors"`
	OfferedBps     float64        `json:"offered_bps"` // 0: unlimited
	GenSentBytes   uint64         `json:"gen_sent_bytes"`
	GenCPUS        float64        `json:"gen_cpu_s"`
	GenLagMaxNs    int64          `json:"gen_lag_max_ns"`
	GenLagNs       report.Latency `json:"gen_lag_ns"` // actual minus scheduled send, per message
	// GenHeld is the fraction of the load scheduled within the duration
	// that the generator wrote within it (1 when unpaced).
	GenHeld float64 `json:"gen_held"`
	// GeneratorBound marks a row whose generator did not hold the offered
	// load (GenHeld < MinHeld) or lagged (lag p99 > MaxGenLagP99): its
	// figures measure the generator, and it never gets a verdict.
	GeneratorBound bool   `json:"generator_bound"`
	GenBoundWhy    string `json:"generator_bound_why,omitempty"`
	// CPU utilisation of each side over the interval, as a fraction of the
	// CPUs it may use, and for unpaced rows the side that limited the
	// throughput: "generator", "engine" or "kernel/both".
	EngineCPUs    int     `json:"engine_cpus"`
	EngineCPUUtil float64 `json:"engine_cpu_util"`
	GenCPUs       int     `json:"gen_cpus"`
	GenCPUUtil    float64 `json:"gen_cpu_util"`
	Bottleneck    string  `json:"bottleneck,omitempty"`
	// RxBacklogBytes is the mean, over samples a quarter, half and three
	// quarters into the run, of the bytes waiting unread in the receive
	// queues of the engine's connections. Tens of KiB per source mean the
	// engine fell behind and the senders wait for window.
	RxBacklogBytes int64 `json:"rx_backlog_bytes"`
	// GenPreemptions counts the generator's involuntary context switches
	// over the interval, and GenRunqueueWaitS the time its threads waited
	// for a CPU: a neighbour competing for the generator's CPUs.
	GenPreemptions   int64    `json:"gen_preemptions"`
	GenRunqueueWaitS float64  `json:"gen_runqueue_wait_s"`
	Counters         Counters `json:"counters"`
	// TLS is the TLS version and cipher suite of a TLS row's sessions.
	TLS string `json:"tls,omitempty"`
	// StreamsVerified counts the generator's streams whose byte count, and
	// CRC-32C when verifying, the engine's stream matched.
	StreamsVerified int               `json:"streams_verified"`
	Verified        bool              `json:"verified"`
	Mismatches      []string          `json:"mismatches,omitempty"`
	Profile         string            `json:"profile,omitempty"`
	TopFunctions    []report.FuncCost `json:"top_functions,omitempty"`
	Rounds          int               `json:"rounds,omitempty"` // summaries only
	// ThroughputRounds and CPURounds are, in a summary of several
	// rounds, the spread of throughput_bps and cpu_s_per_gib over them;
	// the summary's own figures are then their medians.
	ThroughputRounds *RatioSpread `json:"throughput_rounds,omitempty"`
	CPURounds        *RatioSpread `json:"cpu_s_per_gib_rounds,omitempty"`
	CoreRounds       *RatioSpread `json:"core_cpu_s_per_gib_rounds,omitempty"`
	Hist             *hdrhistogram.Histogram
	E2E              *hdrhistogram.Histogram
	// Quiet is the quiet source's (run --quiet-source): the stamps it
	// sent beside the load, the lines the sink's handler timed, and
	// their latency, now minus the stamp, in nanoseconds; QuietHist holds
	// the latencies. Nil without a quiet source.
	Quiet     *load.QuietSummary      `json:"quiet,omitempty"`
	QuietHist *hdrhistogram.Histogram `json:"-"`
	// CPUWin is, for a fio row, the interval (UnixNano) cpu_s_per_gib is
	// over and the bytes received in it, for the whole-core figures.
	CPUWin      [2]int64
	CPUWinBytes uint64
	Weights     []float64
	PerSource   []float64
}

// Gibibyte in bytes.
const Gibibyte = 1 << 30

func CPUPerGiB(cpu float64, bytes uint64) float64 {
	if bytes == 0 {
		return 0
	}
	return cpu / (float64(bytes) / Gibibyte)
}

// measure runs one workload: it starts the sink engine, starts the
// generator process, waits until every connection is accepted, then
// measures from the generator's first byte until every source has ended.
func measure(ctx context.Context, w Workload, ios harness.IO) (*Result, error) {
	msgSize := int(w.MsgSize)
	framer, err := w.Engine.Framer()
	if err != nil {
		return nil, err
	}
	stamped := msgSize
	if framer != nil {
		stamped = 0 // framed messages carry no timestamps
	}
	col := NewCollector(stamped, w.Verify, framer)
	var records func() uint64 // for the progress lines
	if framer != nil {
		records = col.Records.Load
	}
	sk, err := StartSink(w.Engine, w.Runner, []string{w.Wire.ListenAddr()}, col)
	if err != nil {
		return nil, err
	}
	defer sk.Close()

	g, err := StartGen(ctx, w, sk.Addrs()[0], framer, ios)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Result, error) {
		g.Kill()
		return nil, err
	}
	for deadline := time.Now().Add(DialLimit(w.Sources)); sk.Live() < w.Sources; {
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("bench: only %d of %d connections accepted", sk.Live(), w.Sources))
		}
		time.Sleep(5 * time.Millisecond)
	}
	allEnded := col.Expect(w.Sources)

	// Measured phase.
	var prof *CPUProfile
	if w.Profile != "" {
		if prof, err = StartCPUProfile(w.Profile, fmt.Sprintf("cpu-%s-r%d.pprof", w.Row(), w.Round)); err != nil {
			return fail(err)
		}
	}
	smp := harness.StartSampler()
	waits0 := sk.Engine.Pool().Stats().Waits
	rs0 := SumRunnerStats(sk.Engine.Stats().Runners)
	cpu0 := harness.CPUTime()
	core0, coreOK := harness.ReadCores(w.Wire.SinkCPUs, w.Wire.LoadCPUs)
	t0 := time.Now()
	if err := g.Send(); err != nil {
		smp.Finish()
		prof.Stop()
		return fail(err)
	}
	prog := harness.StartProgress(ios, w.Label, w.Duration, col.Total.Load, records)
	backlog := harness.SampleBacklog(sk.Addrs()[0], w.Duration, 0)
	var rep load.GenReport
	var repErr error
	got := false
	endLimit := time.After(w.Duration + 60*time.Second)
	ended := false
	pending := g.Lines // nil once closed
	for !ended || !got {
		select {
		case l, ok := <-pending:
			if !ok {
				pending = nil
				if !got {
					repErr = errors.New("bench: generator exited without a report")
					got = true
				}
				continue
			}
			got = true
			rep, repErr = DecodeGenReport(l)
		case <-allEnded:
			ended = true
			allEnded = nil
		case <-endLimit:
			prog.Finish()
			backlog.Finish()
			smp.Finish()
			prof.Stop()
			return fail(fmt.Errorf("bench: %s: %d of %d sources ended %v after the generator's duration",
				w.Runner, col.Ended.Load(), w.Sources, 60*time.Second))
		case <-ctx.Done():
			prog.Finish()
			backlog.Finish()
			smp.Finish()
			prof.Stop()
			return fail(ctx.Err())
		}
		if repErr != nil {
			break
		}
	}
	// The interval ends when the last source ended; the report may come
	// a moment later, but no engine work happens in between that matters.
	t1 := time.Now()
	core1, core1OK := harness.ReadCores(w.Wire.SinkCPUs, w.Wire.LoadCPUs)
	rxBacklog := backlog.Finish()
	cpu1 := harness.CPUTime() - backlog.CPU // the sampler's reads of /proc are not the engine's
	threads, rss := smp.Finish()
	prog.Finish()
	profPath, profErr := prof.Stop()
	waits := sk.Engine.Pool().Stats().Waits - waits0
	rs1 := SumRunnerStats(sk.Engine.Stats().Runners)
	if err := g.Wait(); err != nil && repErr == nil {
		repErr = err
	}
	if err := sk.Close(); err != nil {
		return nil, err
	}
	if repErr != nil {
		return nil, repErr
	}
	if profErr != nil {
		return nil, profErr
	}

	r := &Result{
		Runner: w.Row(), Round: w.Round, Sources: w.Sources, Bytes: col.Total.Load(),
		DurationS: t1.Sub(t0).Seconds(), CPUS: (cpu1 - cpu0).Seconds(),
		ThreadsMax: threads, RSSMaxBytes: rss, PoolWaits: waits,
		PartialFlushes: col.Partials.Load(), Chunks: col.chunks.Load(), Errors: col.Errs.Load(),
		Profile: profPath, EngineCPUs: runtime.GOMAXPROCS(0), RxBacklogBytes: rxBacklog,
	}
	ApplyGen(r, rep)
	r.Wire = w.Wire.Name()
	if coreOK && core1OK {
		ApplyCore(r, harness.CoreBetween(core0, core1), r.Bytes, len(w.Wire.SinkCPUs), len(w.Wire.LoadCPUs))
	}
	r.Hist, r.E2E = col.latency()
	r.E2ELatencyNs = report.Summarize(r.E2E)
	r.Counters = CounterDeltas(rs0, rs1, r.Bytes, r.DurationS)
	if r.DurationS > 0 && r.EngineCPUs > 0 {
		r.EngineCPUUtil = r.CPUS / (r.DurationS * float64(r.EngineCPUs))
	}
	if rep.OfferedBps == 0 {
		r.Bottleneck = r.NameBottleneck()
	}
	r.ThroughputBps = float64(r.Bytes) / r.DurationS
	r.CPUSPerGiB = CPUPerGiB(r.CPUS, r.Bytes)
	r.LatencyNs = report.Summarize(r.Hist)
	recSize := 0
	if framer != nil {
		recSize = msgSize
	}
	streams := col.Snapshot()
	r.PerSource, r.Weights, r.Mismatches = Reconcile(streams, rep.Streams, w.Verify, recSize)
	r.StreamsVerified = StreamsVerified(streams, rep.Streams, w.Verify)
	for _, s := range streams {
		r.Records += s.Records
		r.RecordsSkipped += s.Skipped
		r.TruncatedBytes += s.Truncated
	}
	r.RecordsPerS = float64(r.Records) / r.DurationS
	r.FairnessJain = WeightedJain(r.PerSource, r.Weights)
	r.Verified = len(r.Mismatches) == 0
	if profPath != "" {
		if r.TopFunctions, err = report.TopFunctions(profPath, 10); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Reconcile matches what the engine received with what the generator
// sent, by peer address, and lists every difference. It returns the bytes
// each sent stream delivered and the stream's weight. With recSize, the
// Stream was framed into records of recSize bytes: every whole record
// sent must have been counted, and the rest of the bytes as truncated.
func Reconcile(got []*Stream, sent []load.GenStream, crc bool, recSize int) (bytes, weights []float64, mismatches []string) {
	byPeer := make(map[string]*Stream, len(got))
	for _, s := range got {
		byPeer[PeerOf(s.Name)] = s
	}
	for _, g := range sent {
		s := byPeer[g.Local]
		delete(byPeer, g.Local)
		w := g.Weight
		if w == 0 {
			w = 1
		}
		weights = append(weights, w)
		if s == nil {
			bytes = append(bytes, 0)
			mismatches = append(mismatches, fmt.Sprintf("%s: sent %d bytes, no such source in the engine", g.Local, g.Bytes))
			continue
		}
		bytes = append(bytes, float64(s.Bytes))
		gotCRC := fmt.Sprintf("%08x", s.CRC)
		switch {
		case s.Bytes != g.Bytes:
			mismatches = append(mismatches, fmt.Sprintf("%s: sent %d bytes, engine received %d", g.Local, g.Bytes, s.Bytes))
		case crc && gotCRC != g.CRC32C:
			mismatches = append(mismatches, fmt.Sprintf("%s: crc32c sent %s, received %s", g.Local, g.CRC32C, gotCRC))
		case recSize > 0 && (s.Records != g.Bytes/uint64(recSize) || s.Truncated != g.Bytes%uint64(recSize) || s.Misframed > 0):
			mismatches = append(mismatches, fmt.Sprintf("%s: sent %d records of %d bytes and %d bytes of one more; engine delivered %d records, %d truncated bytes, %d chunks off a record boundary",
				g.Local, g.Bytes/uint64(recSize), recSize, g.Bytes%uint64(recSize), s.Records, s.Truncated, s.Misframed))
		}
	}
	for peer, s := range byPeer {
		if s.Bytes > 0 {
			mismatches = append(mismatches, fmt.Sprintf("%s: engine received %d bytes the generator did not send", peer, s.Bytes))
		}
	}
	return bytes, weights, mismatches
}

// StreamsVerified counts the streams sent whose bytes, and CRC-32C with
// crc, the engine received exactly.
func StreamsVerified(got []*Stream, sent []load.GenStream, crc bool) int {
	byPeer := make(map[string]*Stream, len(got))
	for _, s := range got {
		byPeer[PeerOf(s.Name)] = s
	}
	n := 0
	for _, g := range sent {
		if s := byPeer[g.Local]; s != nil && s.Bytes == g.Bytes && (!crc || fmt.Sprintf("%08x", s.CRC) == g.CRC32C) {
			n++
		}
	}
	return n
}

// WeightedJain is Jain's index over bytes normalised by each source's
// share of the offered load: with no skew, plain Jain over bytes.
func WeightedJain(bytes, weights []float64) float64 {
	xs := make([]float64, len(bytes))
	for i := range bytes {
		xs[i] = bytes[i] / weights[i]
	}
	return report.JainIndex(xs)
}

// CPUProfile is a CPU profile being written.
type CPUProfile struct {
	f *os.File
}

func StartCPUProfile(dir, name string) (*CPUProfile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: --profile: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("bench: --profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: --profile: %w", err)
	}
	return &CPUProfile{f: f}, nil
}

// Stop ends the profile and returns its path. A nil profile is a no-op.
func (p *CPUProfile) Stop() (string, error) {
	if p == nil || p.f == nil {
		return "", nil
	}
	pprof.StopCPUProfile()
	f := p.f
	p.f = nil
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("bench: --profile: %w", err)
	}
	return f.Name(), nil
}

// MergeResults sums one runner's rounds into a summary.
func MergeResults(rs []*Result) *Result {
	if len(rs) == 0 {
		return nil
	}
	s := &Result{Runner: rs[0].Runner, Sources: rs[0].Sources, Verified: true, Rounds: len(rs), Hist: report.NewHist(), E2E: report.NewHist(),
		GenHeld: 1, EngineCPUs: rs[0].EngineCPUs, GenCPUs: rs[0].GenCPUs}
	s.Wire = rs[0].Wire
	var cnt []Counters
	var engUtil, genUtil, coreUtil, loadUtil float64
	var fair float64
	for _, r := range rs {
		s.Bytes += r.Bytes
		s.DurationS += r.DurationS
		s.CPUS += r.CPUS
		s.ThreadsMax = max(s.ThreadsMax, r.ThreadsMax)
		s.RSSMaxBytes = max(s.RSSMaxBytes, r.RSSMaxBytes)
		s.PoolWaits += r.PoolWaits
		s.PartialFlushes += r.PartialFlushes
		s.Records += r.Records
		s.RecordsSkipped += r.RecordsSkipped
		s.TruncatedBytes += r.TruncatedBytes
		s.Chunks += r.Chunks
		s.Errors += r.Errors
		s.OfferedBps = r.OfferedBps
		s.GenSentBytes += r.GenSentBytes
		s.GenCPUS += r.GenCPUS
		s.GenLagMaxNs = max(s.GenLagMaxNs, r.GenLagMaxNs)
		s.Verified = s.Verified && r.Verified
		if r.ThroughputOver != "" && (s.ThroughputOver == "" || r.ThroughputOver == ThroughputFirstToLast ||
			(r.ThroughputOver == ThroughputMostSending && s.ThroughputOver == ThroughputAllSending)) {
			s.ThroughputOver = r.ThroughputOver // the worst round's
		}
		if r.CPUOver != "" && (s.CPUOver == "" || r.CPUOver == CPUOverListened ||
			(r.CPUOver == ThroughputMostSending && s.CPUOver == ThroughputAllSending)) {
			s.CPUOver = r.CPUOver // the worst round's
		}
		s.Mismatches = append(s.Mismatches, r.Mismatches...)
		fair += r.FairnessJain
		if r.Hist != nil {
			s.Hist.Merge(r.Hist)
		}
		if r.E2E != nil {
			s.E2E.Merge(r.E2E)
		}
		if r.Quiet != nil {
			if s.Quiet == nil {
				s.Quiet, s.QuietHist = &load.QuietSummary{}, report.NewHist()
			}
			s.Quiet.Sent += r.Quiet.Sent
			s.Quiet.Lines += r.Quiet.Lines
			s.Quiet.BadLines += r.Quiet.BadLines
			if r.QuietHist != nil {
				s.QuietHist.Merge(r.QuietHist)
			}
		}
		// The worst round speaks for the generator.
		s.GenHeld = min(s.GenHeld, r.GenHeld)
		if r.GenLagNs.P99 >= s.GenLagNs.P99 {
			s.GenLagNs = r.GenLagNs
		}
		if r.GeneratorBound && !s.GeneratorBound {
			s.GeneratorBound, s.GenBoundWhy = true, r.GenBoundWhy
		}
		s.GenPreemptions += r.GenPreemptions
		s.GenRunqueueWaitS += r.GenRunqueueWaitS
		s.RxBacklogBytes += r.RxBacklogBytes
		engUtil += r.EngineCPUUtil
		genUtil += r.GenCPUUtil
		s.CoreCPUS += r.CoreCPUS
		s.CoreSoftirqS += r.CoreSoftirqS
		s.LoadCoreCPUS += r.LoadCoreCPUS
		coreUtil += r.CoreUtil
		loadUtil += r.LoadCoreUtil
		cnt = append(cnt, r.Counters)
	}
	if s.DurationS > 0 {
		s.ThroughputBps = float64(s.Bytes) / s.DurationS
		s.RecordsPerS = float64(s.Records) / s.DurationS
	}
	s.CPUSPerGiB = CPUPerGiB(s.CPUS, s.Bytes)
	s.CoreCPUSPerGiB = CPUPerGiB(s.CoreCPUS, s.Bytes)
	s.CoreSoftirqSPerGiB = CPUPerGiB(s.CoreSoftirqS, s.Bytes)
	s.LoadCoreCPUSPerGiB = CPUPerGiB(s.LoadCoreCPUS, s.Bytes)
	if s.CPUOver != "" {
		s.CPUSPerGiBListened = s.CPUSPerGiB
	}
	if len(rs) == 1 {
		// A fio row measures its throughput, and its CPU, over less than
		// its duration.
		s.ThroughputBps, s.CPUSPerGiB = rs[0].ThroughputBps, rs[0].CPUSPerGiB
		s.CoreCPUSPerGiB, s.CoreSoftirqSPerGiB, s.LoadCoreCPUSPerGiB = rs[0].CoreCPUSPerGiB, rs[0].CoreSoftirqSPerGiB, rs[0].LoadCoreCPUSPerGiB
	}
	if len(rs) > 1 {
		// Medians, as every comparison is made round by round: one round
		// disturbed by a neighbour moves a sum, not a median.
		tps, cpus := make([]float64, len(rs)), make([]float64, len(rs))
		for i, r := range rs {
			tps[i], cpus[i] = r.ThroughputBps, r.CPUSPerGiB
		}
		t, c := Spread("throughput", tps), Spread("cpu_s_per_gib", cpus)
		s.ThroughputRounds, s.CPURounds = &t, &c
		s.ThroughputBps, s.CPUSPerGiB = t.Median, c.Median
		cores, softs, loads := make([]float64, len(rs)), make([]float64, len(rs)), make([]float64, len(rs))
		for i, r := range rs {
			cores[i], softs[i], loads[i] = r.CoreCPUSPerGiB, r.CoreSoftirqSPerGiB, r.LoadCoreCPUSPerGiB
		}
		if s.CoreCPUS > 0 {
			cs := Spread("core_cpu_s_per_gib", cores)
			s.CoreRounds = &cs
			s.CoreCPUSPerGiB = cs.Median
			s.CoreSoftirqSPerGiB, s.LoadCoreCPUSPerGiB = Spread("", softs).Median, Spread("", loads).Median
		}
	}
	s.FairnessJain = fair / float64(len(rs))
	s.LatencyNs = report.Summarize(s.Hist)
	s.E2ELatencyNs = report.Summarize(s.E2E)
	if s.Quiet != nil {
		s.Quiet.LatencyNs = report.Summarize(s.QuietHist)
	}
	s.RxBacklogBytes /= int64(len(rs))
	s.EngineCPUUtil = engUtil / float64(len(rs))
	s.GenCPUUtil = genUtil / float64(len(rs))
	s.CoreUtil = coreUtil / float64(len(rs))
	s.LoadCoreUtil = loadUtil / float64(len(rs))
	if s.OfferedBps == 0 {
		s.Bottleneck = s.NameBottleneck()
	}
	s.Counters = SumCounters(cnt, s.Bytes, s.DurationS)
	return s
}

// Executable finds the binary to run the generator from.
func Executable(exe string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("bench: cannot find my own binary to start the generator: %w", err)
	}
	return p, nil
}

// ApplyCore fills r's whole-core figures from u, over bytes received.
func ApplyCore(r *Result, u harness.CoreUse, bytes uint64, sinkCPUs, loadCPUs int) {
	r.CoreCPUS, r.CoreSoftirqS, r.LoadCoreCPUS = u.Sink, u.Soft, u.Load
	r.CoreCPUSPerGiB = CPUPerGiB(u.Sink, bytes)
	r.CoreSoftirqSPerGiB = CPUPerGiB(u.Soft, bytes)
	r.LoadCoreCPUSPerGiB = CPUPerGiB(u.Load, bytes)
	// /proc/stat counts in 10 ms ticks, so a core busy throughout a short
	// interval can read a tick or two over it.
	if u.Seconds > 0 {
		if sinkCPUs > 0 {
			r.CoreUtil = min(u.Sink/(u.Seconds*float64(sinkCPUs)), 1)
		}
		if loadCPUs > 0 {
			r.LoadCoreUtil = min(u.Load/(u.Seconds*float64(loadCPUs)), 1)
		}
	}
}

// How a fio row's throughput was measured (Result.ThroughputOver).
const (
	ThroughputAllSending  = "all sending"        // while every connection sent
	ThroughputMostSending = "90% sending"        // while 90% of them did
	ThroughputFirstToLast = "first to last byte" // neither lasted long enough
	// CPUOverListened is Result.CPUOver when the CPU per GiB covers the
	// whole time the sink listened: the sink kept no usage samples, or
	// the throughput was measured from the first byte to the last.
	CPUOverListened = "listened"
)

// Row is the name of w's row in the report.
func (w Workload) Row() string {
	if w.TLS != nil {
		return w.Runner + "+tls"
	}
	return w.Runner
}
