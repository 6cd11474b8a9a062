package sink

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
)

// SinkConfig configures the `sink` command: the engine alone, for external
// load generators such as fio's net engine.
type SinkConfig struct {
	Listen    string // first address
	Ports     int    // listen on Ports consecutive ports from Listen's
	Runner    string
	Engine    harness.EngineFlags
	Duration  time.Duration // stop after this long; 0: no limit
	UntilIdle time.Duration // stop once idle this long; 0: never
	JSON      string        // report file; "-" or "" for stdout
	Profile   string        // CPU profile file, from listening to the report; "" for none
	// Proto is ProtoTCP (listeners) or ProtoUDP (one UDP source on
	// Listen; see sinkUDP).
	Proto string
	// DatagramSize is the load's datagram size with --proto udp: the
	// source's MaxDatagram, and what the sink counts as the load's.
	DatagramSize int
	// UDPReadBuffer is the UDP socket's SO_RCVBUF.
	UDPReadBuffer report.Size
}

// DefaultSinkConfig returns the documented defaults.
func DefaultSinkConfig() SinkConfig {
	return SinkConfig{Listen: "127.0.0.1:9000", Ports: 1, Runner: engine.RunnerAuto, JSON: "-", Proto: load.ProtoTCP, UDPReadBuffer: DefaultUDPReadBuffer}
}

// RegisterFlags defines c's flags on fs.
func (c *SinkConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "listen on `ADDR`")
	fs.IntVar(&c.Ports, "ports", c.Ports, "also listen on the N-1 following ports (fio's numjobs clones connect to port+i)")
	fs.StringVar(&c.Runner, "runner", c.Runner, "auto, uring, epoll, goroutine or thread")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "stop after this long (default: no limit)")
	fs.DurationVar(&c.UntilIdle, "until-idle", c.UntilIdle, "stop once bytes arrived, no source is live, and nothing arrived for this long")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.Profile, "profile", c.Profile, "write a CPU profile (pprof) of the time listened to `FILE`")
	c.Engine.Register(fs)
	c.Engine.RegisterListen(fs)
	c.Engine.RegisterFraming(fs, "")
	fs.IntVar(&c.Engine.MaxConns, "max-conns", c.Engine.MaxConns, "cap on open connections per listener (default: none)")
	fs.StringVar(&c.Proto, "proto", c.Proto, "tcp (listeners), or udp: one UDP source on --listen, counting its datagrams until --until-idle")
	fs.IntVar(&c.DatagramSize, "datagram-size", c.DatagramSize, "with --proto udp: the load's datagram size, the source's MaxDatagram; datagrams of other sizes are counted apart")
	fs.Var(&c.UDPReadBuffer, "udp-read-buffer", "with --proto udp: the socket's SO_RCVBUF; the kernel doubles it, capped at net.core.rmem_max")
}

// Validate checks c, naming the flag at fault.
func (c SinkConfig) Validate() error {
	if err := c.validateUDP(); err != nil {
		return err
	}
	if _, err := c.addrs(); err != nil {
		return err
	}
	switch {
	case c.Ports < 1 || c.Ports > 4096:
		return fmt.Errorf("--ports: %d: must be from 1 to 4096", c.Ports)
	case c.Runner != engine.RunnerAuto && !slices.Contains(harness.AllRunners(), c.Runner):
		return fmt.Errorf("--runner: %q: must be auto, uring, epoll, goroutine or thread", c.Runner)
	case c.Duration < 0:
		return fmt.Errorf("--duration: %v: must not be negative", c.Duration)
	case c.UntilIdle < 0:
		return fmt.Errorf("--until-idle: %v: must not be negative", c.UntilIdle)
	}
	return c.Engine.Validate()
}

// clocks returns what a sink's loop waits on besides its context: the end
// of --duration (nil without one) and the ticker that samples its usage,
// often enough to see --until-idle; stop releases both.
func (c SinkConfig) clocks() (limit <-chan time.Time, ticker *time.Ticker, stop func()) {
	var timer *time.Timer
	if c.Duration > 0 {
		timer = time.NewTimer(c.Duration)
		limit = timer.C
	}
	tick := harness.UsageSampleEvery
	if c.UntilIdle > 0 {
		tick = min(tick, max(c.UntilIdle/4, 5*time.Millisecond))
	}
	ticker = time.NewTicker(tick)
	return limit, ticker, func() {
		if timer != nil {
			timer.Stop()
		}
		ticker.Stop()
	}
}

// addrs expands Listen and Ports into listen addresses.
func (c SinkConfig) addrs() ([]string, error) {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen: %q: %v", c.Listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return nil, fmt.Errorf("--listen: %q: bad port", c.Listen)
	}
	if c.Ports > 1 && (p == 0 || p+c.Ports-1 > 65535) {
		return nil, fmt.Errorf("--ports: %d ports from %q do not fit (the port must be fixed and the range end at 65535)", c.Ports, c.Listen)
	}
	out := make([]string, max(c.Ports, 1))
	for i := range out {
		out[i] = net.JoinHostPort(host, strconv.Itoa(p+i))
	}
	return out, nil
}

// SinkStream is one source in the sink's report. Source, the engine's
// source id, names the stream; Peer is its address, an attribute: a peer
// may reuse a closed connection's port (loopback does at once), so two
// streams can share one. The record fields count only with --framing (see
// SinkReport).
type SinkStream struct {
	Source         uint64 `json:"source"`
	Peer           string `json:"peer"`
	Bytes          uint64 `json:"bytes"`
	CRC32C         string `json:"crc32c"`
	Errors         uint64 `json:"errors"`
	Records        uint64 `json:"records"`
	RecordsSkipped uint64 `json:"records_skipped"`
	TruncatedBytes uint64 `json:"truncated_bytes"`
	// FirstNs and LastNs are when its first and latest bytes arrived
	// (UnixNano).
	FirstNs int64 `json:"first_ns"`
	LastNs  int64 `json:"last_ns"`
}

// SinkReport is the sink's JSON report. duration_s runs from the first
// byte to the last, and throughput_bps is bytes over it; wall_s is the
// whole time listened, over which cpu_s (getrusage, user+sys) is
// measured.
//
// With --framing, records counts the whole records delivered and
// records_per_s is records over duration_s; records_skipped counts those
// too long for the framer or a buffer, which the engine dropped (newline
// and octet counting skip them and read on; a length prefix or MQTT
// packet ends its connection), and truncated_bytes the bytes of records
// the peers never finished, delivered in each stream's last chunk (bytes
// includes them). Without framing they are 0. Each total is the sum of
// the streams' counts.
type SinkReport struct {
	Command       string   `json:"command"` // "sink"
	Runner        string   `json:"runner"`
	Listen        []string `json:"listen"`
	Sources       int      `json:"sources"`
	Framing       string   `json:"framing"`
	Bytes         uint64   `json:"bytes"`
	Records       uint64   `json:"records"`
	RecordsPerS   float64  `json:"records_per_s"`
	Skipped       uint64   `json:"records_skipped"`
	Truncated     uint64   `json:"truncated_bytes"`
	DurationS     float64  `json:"duration_s"`
	WallS         float64  `json:"wall_s"`
	ThroughputBps float64  `json:"throughput_bps"`
	// SteadyBps is the throughput while every source was sending, from
	// the last one's first byte to the first end of stream (SteadyS
	// long); 0 when a source ended before the last one began.
	SteadyBps  float64 `json:"steady_throughput_bps"`
	SteadyS    float64 `json:"steady_s"`
	CPUS       float64 `json:"cpu_s"`
	CPUSPerGiB float64 `json:"cpu_s_per_gib"`
	// Usage samples the process's CPU time and the bytes received every
	// 100 ms while it listened, so that a reader can take the CPU over
	// any interval of the run (UsageOver).
	Usage        []harness.UsageSample `json:"usage,omitempty"`
	ThreadsMax   int                   `json:"threads_max"`
	RSSMaxBytes  int64                 `json:"rss_max_bytes"`
	FairnessJain float64               `json:"fairness_jain"`
	PoolWaits    uint64                `json:"pool_waits"`
	Partials     uint64                `json:"partial_flushes"`
	Errors       uint64                `json:"errors"`
	// ErrorSamples are the first errors' messages.
	ErrorSamples []string `json:"error_samples,omitempty"`
	StopReason   string   `json:"stop_reason"`
	// Counters are the runner's own over the time listened, the rates
	// over duration_s.
	Counters bench.Counters `json:"counters"`
	Profile  string         `json:"profile,omitempty"` // --profile
	Host     harness.Host   `json:"host"`
	Streams  []SinkStream   `json:"streams"`
	// Quiet is what the quiet sources brought (load.QuietHeader): their
	// lines, timed by the handler as it got them. The figures above
	// leave them out. Nil when none connected.
	Quiet *load.QuietReport `json:"quiet,omitempty"`
}

// Sink runs the `sink` command until ctx ends (SIGINT), Duration passes,
// or UntilIdle holds, then writes its report.
func Sink(ctx context.Context, c SinkConfig, ios harness.IO) (*SinkReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Proto == load.ProtoUDP {
		_, err := sinkUDP(ctx, c, ios)
		return nil, err
	}
	addrs, _ := c.addrs()
	framer, _ := c.Engine.Framer()
	col := bench.NewCollector(0, true, framer)
	sk, err := bench.StartSink(c.Engine, c.Runner, addrs, col)
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			sk.Close()
		}
	}()
	bound := sk.Addrs()
	var prof *bench.CPUProfile
	if c.Profile != "" {
		if prof, err = bench.StartCPUProfile(filepath.Dir(c.Profile), filepath.Base(c.Profile)); err != nil {
			return nil, err
		}
	}
	smp := harness.StartSampler()
	rs0 := bench.SumRunnerStats(sk.Engine.Stats().Runners)
	cpu0 := harness.CPUTime()
	t0 := time.Now()
	framing := ""
	if framer != nil {
		framing = ", framing " + framer.String()
	}
	fmt.Fprintf(ios.Err, "sluice-bench sink: listening on %s (runner %s%s)\n", joinStrings(bound), sk.Engine.Runner(), framing)

	reason := "interrupted"
	limit, ticker, stopClocks := c.clocks()
	defer stopClocks()
	usage := []harness.UsageSample{{UnixNs: t0.UnixNano()}}
	lastReport := t0
	var lastBytes, lastRecs uint64
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-limit:
			reason = "duration"
			break loop
		case now := <-ticker.C:
			total := col.Total.Load()
			usage = harness.AppendUsage(usage, harness.UsageSample{UnixNs: now.UnixNano(), CPUNs: int64(harness.CPUTime() - cpu0), Bytes: total})
			// The live count walks every source: ask for it only
			// once the bytes have stopped, not on every tick of a run.
			if c.UntilIdle > 0 && total > 0 && now.Sub(time.Unix(0, col.Last.Load())) >= c.UntilIdle &&
				sk.Live() == 0 {
				reason = "idle"
				break loop
			}
			if now.Sub(lastReport) >= 5*time.Second {
				secs := now.Sub(lastReport).Seconds()
				recs := ""
				if framer != nil {
					n := col.Records.Load()
					recs = fmt.Sprintf(", %s records, %s records/s", humanize.Comma(int64(n)), humanize.Comma(int64(float64(n-lastRecs)/secs)))
					lastRecs = n
				}
				fmt.Fprintf(ios.Err, "sluice-bench sink: %d sources live, %s received, %s%s\n", sk.Live(), report.FormatBytes(total),
					report.FormatRate(float64(total-lastBytes)/secs), recs)
				lastReport, lastBytes = now, total
			}
		}
	}
	wall := time.Since(t0)
	usage = harness.AppendUsage(usage, harness.UsageSample{UnixNs: time.Now().UnixNano(), CPUNs: int64(harness.CPUTime() - cpu0), Bytes: col.Total.Load()})
	rs1 := bench.SumRunnerStats(sk.Engine.Stats().Runners)
	waits := sk.Engine.Pool().Stats().Waits
	runner := sk.Engine.Runner()
	closed = true
	if err := sk.Close(); err != nil {
		return nil, err
	}
	cpu := harness.CPUTime() - cpu0
	threads, rss := smp.Finish()
	profPath, err := prof.Stop()
	if err != nil {
		return nil, err
	}

	rep := &SinkReport{Command: "sink", Runner: runner, Listen: bound, Framing: harness.FramingName(framer), Bytes: col.Total.Load(),
		WallS: wall.Seconds(), CPUS: cpu.Seconds(), ThreadsMax: threads, RSSMaxBytes: rss,
		PoolWaits: waits, Partials: col.Partials.Load(), Errors: col.Errs.Load(), StopReason: reason, Host: harness.HostInfo(),
		Profile: profPath, Usage: usage, Streams: []SinkStream{}, Quiet: col.Quiet()}
	if f, l := col.First.Load(), col.Last.Load(); f > 0 && l > f {
		rep.DurationS = time.Duration(l - f).Seconds()
		rep.ThroughputBps = float64(rep.Bytes) / rep.DurationS
	}
	rep.SteadyBps, rep.SteadyS = col.Steady()
	rep.Counters = bench.CounterDeltas(rs0, rs1, rep.Bytes, rep.DurationS)
	rep.ErrorSamples = col.ErrorSamples()
	rep.CPUSPerGiB = bench.CPUPerGiB(rep.CPUS, rep.Bytes)
	var xs []float64
	for _, s := range col.Snapshot() {
		st := SinkStream{Source: uint64(s.ID), Peer: bench.PeerOf(s.Name), Bytes: s.Bytes,
			CRC32C: fmt.Sprintf("%08x", s.CRC), Errors: s.Errors.Load(),
			Records: s.Records, RecordsSkipped: s.Skipped, TruncatedBytes: s.Truncated, FirstNs: s.First, LastNs: s.Last}
		rep.Streams = append(rep.Streams, st)
		rep.Records += st.Records
		rep.Skipped += st.RecordsSkipped
		rep.Truncated += st.TruncatedBytes
		xs = append(xs, float64(s.Bytes))
	}
	if rep.DurationS > 0 {
		rep.RecordsPerS = float64(rep.Records) / rep.DurationS
	}
	rep.Sources = len(rep.Streams)
	rep.FairnessJain = report.JainIndex(xs)
	recs := ""
	if framer != nil {
		recs = fmt.Sprintf("; %s records (%s records/s), %s skipped, %s truncated",
			humanize.Comma(int64(rep.Records)), humanize.Comma(int64(rep.RecordsPerS)), humanize.Comma(int64(rep.Skipped)), report.FormatBytes(rep.Truncated))
	}
	fmt.Fprintf(ios.Err, "sluice-bench sink: stopped (%s): %d sources, %s in %.2fs, %s, %.3f CPU-s/GiB%s\n",
		reason, rep.Sources, report.FormatBytes(rep.Bytes), rep.DurationS, report.FormatRate(rep.ThroughputBps), rep.CPUSPerGiB, recs)
	path := c.JSON
	if path == "" {
		path = "-"
	}
	if err := harness.WriteJSON(path, rep, ios); err != nil {
		return rep, err
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
		return rep, ctx.Err()
	}
	return rep, nil
}

func joinStrings(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}
