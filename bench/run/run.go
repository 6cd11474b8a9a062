package run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/sink"
	"github.com/sluice-io/sluice/srcs"
)

// RunConfig configures the `run` command.
type RunConfig struct {
	Runners  report.StringList // empty: every runner available here
	Rounds   int
	Sources  int
	Duration time.Duration
	MsgSize  report.Size
	Rate     report.Rate // per source; 0 unlimited
	Arrivals string
	// GenPacing is the built-in generator's pacing (GenConfig.Pacing).
	GenPacing string
	Skew      float64
	MaxDial   int
	Engine    harness.EngineFlags
	Verify    bool   // CRC-32C every stream and compare with the generator
	Pin       bool   // pin engine and generator to disjoint CPUs
	JSON      string // report file, "-" for stdout
	Plot      string // directory for SVG charts
	Profile   string // directory for CPU profiles
	Exe       string // binary that runs `gen`; default os.Executable
	// Targets are judged on every comparison of the first runner with
	// another (see Verdict).
	Targets bench.TargetList
	// IPerf3 adds a reference row per round: iperf3 on loopback, pinned
	// like the engine and the generator.
	IPerf3 bool
	// InProcess measures every runner in this process instead of a fresh
	// child per runner and round.
	InProcess bool
	// Client sends the load: load.ClientGen (the built-in generator) or
	// load.ClientFio (fio's net engine, one job and connection per source).
	Client string
	// Peers are reference rows measured in the same rounds as the
	// runners, pinned like them: peers.Gnet, peers.Go, peers.Epoll (whose
	// row is peers.EpollRow).
	Peers report.StringList
	// RecordSize is the line length fio writes with --framing newline
	// (0: DefaultFioRecordSize); each --msg-size write holds whole lines.
	RecordSize report.Size
	// GnetSink is a ready-built gnet sink (bench/gnetsink); "" builds it.
	GnetSink string
	// TLS adds the row RowTLS, measured first in every round (see tls.go).
	TLS bool
	// Wire is how the load reaches the sinks: WireAuto (the default),
	// WireVeth or WireLoopback.
	Wire string
	// Proto is what the load speaks: ProtoTCP, or ProtoUDP (fio's
	// datagrams to one UDP port; see RunUDP).
	Proto string
	// UDPRates are the datagrams per second offered over all fio jobs
	// with --proto udp, one sweep step each; none: flat out.
	UDPRates DatagramRates
	// UDPReadBuffer is the UDP sinks' SO_RCVBUF.
	UDPReadBuffer report.Size
	// UDPMaxLoss is a sweep's pass mark (DefaultUDPMaxLoss).
	UDPMaxLoss float64
	// QuietSource, when positive, adds a quiet source to every row of a
	// --client fio run: one more connection to the same sink that sends
	// its clock as a line this often (see load.QuietHeader), each line
	// timed by the sink's handler.
	QuietSource time.Duration
}

// DefaultRunConfig returns the defaults documented on the flags.
func DefaultRunConfig() RunConfig {
	return RunConfig{
		Rounds: 1, Sources: load.DefaultRunSources, Duration: load.DefaultRunDuration, MsgSize: load.DefaultRunMsgSize,
		Arrivals: load.ArrivalsPoisson, MaxDial: load.DefaultMaxDial, Verify: true, Pin: true, Client: load.ClientGen, Wire: harness.WireAuto,
		Proto: load.ProtoTCP, UDPReadBuffer: sink.DefaultUDPReadBuffer, UDPMaxLoss: DefaultUDPMaxLoss,
	}
}

// recordSize is the line length of fio's newline records.
func (c RunConfig) recordSize() int {
	if c.RecordSize > 0 {
		return int(c.RecordSize)
	}
	return load.DefaultFioRecordSize
}

// RegisterFlags defines c's flags on fs, with c's values as defaults.
func (c *RunConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Runners, "runners", "comma-separated runners to compare, in order (default: every one available of uring,epoll,goroutine,thread)")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "measure every runner this many times, alternating the order")
	fs.IntVar(&c.Sources, "sources", c.Sources, "concurrent TCP sources")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long the generator sends, per runner and round")
	fs.Var(&c.MsgSize, "msg-size", "fixed message size; without --framing each message starts with a 16-byte header: scheduled and actual send times")
	fs.Var(&c.Rate, "rate", "mean bytes per second per source, e.g. 1MiB/s (default unlimited)")
	fs.StringVar(&c.Arrivals, "arrivals", c.Arrivals, "open-loop arrivals with --rate: poisson or uniform")
	fs.StringVar(&c.GenPacing, "gen-pacing", c.GenPacing, "with --rate, how the built-in generator writes its arrivals: "+load.PacingHelp+" (default "+load.DefaultPacing+")")
	fs.Float64Var(&c.Skew, "skew", c.Skew, "biased connections: a fraction F of the sources carries 1-F of the load (needs --rate)")
	fs.IntVar(&c.MaxDial, "max-dial", c.MaxDial, "concurrent dials of the generator")
	fs.BoolVar(&c.Verify, "verify", c.Verify, "checksum every stream (CRC-32C) and compare with what was sent")
	fs.BoolVar(&c.Pin, "pin", c.Pin, "pin the engine and the generator to disjoint CPUs (when there are 2 or more)")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.Plot, "plot", c.Plot, "write SVG charts into `DIR`")
	fs.StringVar(&c.Profile, "profile", c.Profile, "write a CPU profile per runner into `DIR` and print the top functions")
	fs.BoolVar(&c.IPerf3, "iperf3", c.IPerf3, "add a reference row per round: one iperf3 stream on loopback, pinned like the engine and the generator (needs iperf3)")
	fs.BoolVar(&c.InProcess, "in-process", c.InProcess, "host every runner's engine in this process instead of a fresh child process per runner and round")
	fs.StringVar(&c.Client, "client", c.Client, "what sends the load: gen (the built-in generator) or fio (fio's net engine, a job and TCP connection per source, "+
		"--msg-size per write, --rate per job with Poisson or linear arrivals, TCP_NODELAY; its totals reconciled with fio's report)")
	fs.Var(&c.Peers, "peers", "reference rows measured in the same rounds, pinned like the engine, each a sink doing the consumer's job, built from bench/gnetsink: "+
		"gnet (on gnet v2's event loops), go (Go's net package, a goroutine per connection; with --tls also go+tls, behind crypto/tls), "+
		"epoll (Linux, TCP: a bare edge-triggered epoll loop on one locked thread, one shared 64 KiB buffer; its row is "+peers.EpollRow+")")
	fs.Var(&c.RecordSize, "record-size", fmt.Sprintf("with --client fio --framing newline: the length of each line fio writes (default %d); --msg-size must hold whole lines", load.DefaultFioRecordSize))
	fs.StringVar(&c.GnetSink, "gnet-sink", c.GnetSink, "the reference sinks' binary, for --peers (default: go build bench/gnetsink into the user cache directory)")
	fs.BoolVar(&c.TLS, "tls", c.TLS, "add a row first: TLS ingestion (TLS 1.3 from the generator into a TLS listener, on the goroutine runner that carries TLS), "+
		"with its ratios to every plaintext row; unpaced runs of the built-in generator only")
	fs.StringVar(&c.Wire, "wire", c.Wire, "how the load reaches the sinks: veth (the sink and the load in network namespaces of their own, joined by a veth pair, "+
		"each side's receive work steered to its own CPU, as between two hosts; needs root and ip), loopback (127.0.0.1, where the sender's work lands on the sink's CPU), "+
		"or auto (veth when it can be built, else loopback with the reason)")
	fs.Var(&c.Targets, "target", "judge ratios of the first runner to each other one, e.g. cpu_s_per_gib<=0.9,throughput>=1 (metrics: throughput, cpu_s_per_gib, core_cpu_s_per_gib, p99, e2e_p99, rss, threads, syscalls_per_mib; on the veth wire cpu_s_per_gib is judged by the whole receiving core): met, missed or inconclusive over the rounds' min-max")
	fs.StringVar(&c.Proto, "proto", c.Proto, "tcp, or udp: the load (--client fio: a thread per source, at most 64; gen: a socket per source, at most 10000) "+
		"sends --msg-size datagrams to one UDP port, and each row reports the datagrams delivered, the kernel's drops "+
		"and the core-seconds per million delivered")
	fs.Var(&c.UDPRates, "udp-rate", "with --proto udp: datagrams per second offered over all sources, e.g. 200k (default flat out); "+
		"a comma-separated rising list is a sweep that reports the highest rate each row sustains within --udp-max-loss")
	fs.Var(&c.UDPReadBuffer, "udp-read-buffer", "with --proto udp: every sink's SO_RCVBUF; the kernel doubles it, capped at net.core.rmem_max")
	fs.Float64Var(&c.UDPMaxLoss, "udp-max-loss", c.UDPMaxLoss, "with a --udp-rate sweep: the largest median fraction lost at which a rate counts as sustained")
	fs.DurationVar(&c.QuietSource, "quiet-source", c.QuietSource, "with --client fio: one more connection to each row's sink, from the load's side, "+
		"that sends its clock (CLOCK_REALTIME) as a line this often, e.g. 20ms, while fio runs; each row reports the latency of its lines, "+
		"p50, p99 and max of now minus the stamp as the sink's handler got each line")
	c.Engine.Register(fs)
	c.Engine.RegisterListen(fs)
	c.Engine.RegisterFraming(fs, "; the generator sends each --msg-size message as one such record, without timestamps: "+
		"framed runs measure no latency")
}

// Validate checks c, naming the flag at fault.
func (c RunConfig) Validate() error {
	if err := bench.ValidRunners(c.Runners); err != nil {
		return err
	}
	if c.Rounds < 1 {
		return fmt.Errorf("--rounds: %d: must be at least 1", c.Rounds)
	}
	if err := harness.ValidWire(c.Wire); err != nil {
		return err
	}
	if c.Wire == harness.WireVeth && c.InProcess {
		return errors.New("--wire veth: not with --in-process (the sink runs in a process of its own in the sink's namespace)")
	}
	if c.Wire == harness.WireVeth && !c.Pin {
		return errors.New("--wire veth: needs --pin (the sink and the load each on CPUs of their own)")
	}
	for i, p := range c.Peers {
		if !slices.Contains(peers.All(), p) {
			return fmt.Errorf("--peers: %q: must be gnet, go or epoll", p)
		}
		if p == peers.Epoll && runtime.GOOS != "linux" {
			return fmt.Errorf("--peers: epoll: the bare epoll loop is Linux only (this is %s)", runtime.GOOS)
		}
		if slices.Contains(c.Peers[:i], p) {
			return fmt.Errorf("--peers: %s is named twice: each peer is one row", p)
		}
	}
	if err := c.validateUDP(); err != nil {
		return err
	}
	if err := c.validateQuiet(); err != nil {
		return err
	}
	if c.Proto == load.ProtoUDP {
		return c.Engine.Validate()
	}
	if err := c.validateClient(); err != nil {
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	g := c.gen()
	if err := g.Validate(); err != nil {
		return err
	}
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	return c.validateFraming()
}

// validateClient checks what the chosen client and peers can do.
func (c RunConfig) validateClient() error {
	f, err := c.Engine.Framer()
	if err != nil {
		return err
	}
	if _, ok := f.(srcs.Newline); f != nil && !ok && len(c.Peers) > 0 {
		return fmt.Errorf("--peers: the reference sinks count newline records only, not %s", f)
	}
	switch c.Client {
	case load.ClientGen:
		if c.RecordSize != 0 {
			return errors.New("--record-size: only with --client fio (the generator sends each --msg-size message as one record)")
		}
		return nil
	case load.ClientFio:
	default:
		return fmt.Errorf("--client: %q: must be gen or fio", c.Client)
	}
	switch {
	case c.GenPacing != "":
		return errors.New("--gen-pacing: the built-in generator's; fio paces each job itself")
	case c.Sources > load.FioMaxJobs:
		return fmt.Errorf("--sources: %d: fio runs at most %d jobs", c.Sources, load.FioMaxJobs)
	case c.Skew != 0:
		return errors.New("--skew: not with --client fio (every fio job gets --rate)")
	case c.RecordSize != 0 && f == nil:
		return errors.New("--record-size: needs --framing newline")
	}
	for _, t := range c.Targets {
		if t.Metric == "p99" || t.Metric == "e2e_p99" {
			return fmt.Errorf("--target: %s: a run with --client fio measures no latency", t)
		}
	}
	if f == nil {
		return nil
	}
	if _, ok := f.(srcs.Newline); !ok {
		return fmt.Errorf("--framing %s: --client fio writes newline records only (fio's buffer_pattern)", f)
	}
	rs := c.recordSize()
	switch {
	case rs < 2 || rs > load.FioMaxPattern:
		return fmt.Errorf("--record-size: %d: must be from 2 to %d bytes (fio's buffer_pattern)", rs, load.FioMaxPattern)
	case int(c.MsgSize)%rs != 0:
		return fmt.Errorf("--msg-size: %d: must hold whole %d-byte lines (--record-size)", c.MsgSize, rs)
	}
	pc, _ := c.Engine.PoolConfig()
	if err := load.CheckRecord(f, rs, pc.BufSize); err != nil {
		return fmt.Errorf("--record-size: a %d-byte line does not fit a %d-byte pool buffer (--buf): %v", rs, pc.BufSize, err)
	}
	return nil
}

// validateQuiet checks what a quiet source can go with: fio's load,
// whose sinks read raw bytes.
func (c RunConfig) validateQuiet() error {
	switch {
	case c.QuietSource == 0:
		return nil
	case c.QuietSource < 0:
		return fmt.Errorf("--quiet-source: %v: must be positive", c.QuietSource)
	case c.QuietSource < time.Millisecond:
		return fmt.Errorf("--quiet-source: %v: a quiet source sends at most a line a millisecond", c.QuietSource)
	case c.Proto == load.ProtoUDP:
		return errors.New("--quiet-source: TCP only (a quiet source is a connection)")
	case c.Client != load.ClientFio:
		return errors.New("--quiet-source: only with --client fio (the quiet source runs beside fio's load)")
	case c.Engine.Framing != "" && c.Engine.Framing != "none":
		return fmt.Errorf("--quiet-source: not with --framing %s (the sinks read raw bytes, and the quiet source's lines among them)", c.Engine.Framing)
	}
	return nil
}

// validateFraming checks that a framed run's records can be delivered
// whole, and that no target needs the latency it does not measure.
func (c RunConfig) validateFraming() error {
	f, _ := c.Engine.Framer()
	if f == nil || c.Client == load.ClientFio {
		return nil
	}
	pc, _ := c.Engine.PoolConfig()
	if err := load.CheckRecord(f, int(c.MsgSize), pc.BufSize); err != nil {
		return fmt.Errorf("--msg-size: a %d-byte %s record does not fit a %d-byte pool buffer (--buf): %v", c.MsgSize, f, pc.BufSize, err)
	}
	for _, t := range c.Targets {
		if t.Metric == "p99" || t.Metric == "e2e_p99" {
			return fmt.Errorf("--target: %s: a framed run (--framing %s) measures no latency", t, f)
		}
	}
	return nil
}

func (c RunConfig) gen() load.GenConfig {
	return load.GenConfig{Addr: "-", Sources: c.Sources, Duration: c.Duration, MsgSize: c.MsgSize, Rate: c.Rate,
		Arrivals: c.Arrivals, Pacing: c.GenPacing, Skew: c.Skew, MaxDial: c.MaxDial, Framing: c.Engine.Framing}
}

// fioNote is the report's note on a run with --client fio.
const fioNote = "client fio: latency not measured (latency_ns, e2e_latency_ns and the generator's lag are zero); " +
	"throughput is over the time every connection was sending, or else 90% of them (fio starts its jobs one by one), " +
	"or else from the first byte to the last; CPU-s/GiB is each sink process's CPU time per GiB over the same interval " +
	"(from its samples every 100 ms), or over the whole time it listened when the throughput is from first byte to last; " +
	"verified means the bytes per connection, with fio's 8-byte trailers, the connection count and any records reconciled with fio's report"

// gnetLatencyNote is the report's note on the reference rows under the
// built-in generator.
const gnetLatencyNote = "peers: latency not measured (the reference sinks read no timestamps)"

// noLatencyNote is the report's note on a framed run.
const noLatencyNote = "latency not measured: with --framing the generator's messages are records without timestamps " +
	"(latency_ns and e2e_latency_ns are zero)"

// RunReport is the JSON report of `run` (see the package documentation).
type RunReport struct {
	Command string        `json:"command"` // "run"
	Host    harness.Host  `json:"host"`
	Pinning bench.Pinning `json:"pinning"`
	// Wire is the wire the load crossed, and why auto fell back to
	// loopback.
	Wire    harness.WireInfo `json:"wire"`
	Config  runParams        `json:"config"`
	Runs    []*bench.Result  `json:"runs"`
	Summary []*bench.Result  `json:"summary"`
	// Ratios compare the first runner with each other one, round by
	// round: median and min-max of every ratio.
	Ratios   []bench.Comparison    `json:"ratios"`
	Verdicts []bench.TargetVerdict `json:"verdicts,omitempty"`
	Skipped  []bench.Skipped       `json:"skipped"`
	// Failed lists runners that started but could not carry the load (a
	// thread cap, a dial failure); the others are still measured.
	Failed []bench.Skipped `json:"failed"`
	// Notes qualify the figures, such as the latency a framed run does
	// not measure.
	Notes []string `json:"notes,omitempty"`
	OK    bool     `json:"ok"` // every byte verified
}

type runParams struct {
	Client string   `json:"client"` // "gen" or "fio"
	Peers  []string `json:"peers,omitempty"`
	// RecordSize is the length of fio's newline records (--client fio).
	RecordSize int64   `json:"record_size,omitempty"`
	Sources    int     `json:"sources"`
	DurationS  float64 `json:"duration_s"`
	MsgSize    int64   `json:"msg_size"`
	RateBps    float64 `json:"rate_bps"` // per source; 0 unlimited
	Arrivals   string  `json:"arrivals"`
	// Pacing is the built-in generator's, with a rate.
	Pacing  string  `json:"pacing,omitempty"`
	Skew    float64 `json:"skew"`
	Rounds  int     `json:"rounds"`
	Pool    int     `json:"pool"`
	Buf     int64   `json:"buf"`
	Workers int     `json:"workers"`
	FlushNs int64   `json:"flush_ns"`
	Verify  bool    `json:"verify"`
	Framing string  `json:"framing"` // "none": raw bytes
	TLS     bool    `json:"tls,omitempty"`
	// Inline says the engine's consumer ran where each chunk was read
	// (--inline).
	Inline bool `json:"inline,omitempty"`
	// QuietEveryNs is --quiet-source: how often the quiet source sent a
	// line; 0 without one.
	QuietEveryNs int64 `json:"quiet_every_ns,omitempty"`
}

// Run runs the `run` command: every runner in turn, the table on ios.Out,
// and the optional JSON, plots and profiles.
//
// With --proto udp it runs RunUDP instead, and returns no RunReport.
func Run(ctx context.Context, c RunConfig, ios harness.IO) (*RunReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cpu := harness.MarkCPU() // what other processes use while it runs: see BusyNote
	if c.Proto == load.ProtoUDP {
		_, err := RunUDP(ctx, c, ios)
		return nil, err
	}
	c.Peers = peers.Rows(c.Peers) // from here on, rows
	exe, err := bench.Executable(c.Exe)
	if err != nil {
		return nil, err
	}
	runners, skipped, err := bench.PickRunners(c.Runners, harness.AllRunners(), ios.Err)
	if err != nil {
		return nil, err
	}
	framer, _ := c.Engine.Framer()
	var fenv fioEnv
	if c.Client == load.ClientFio {
		if fenv.fio, err = load.FindFio(); err != nil {
			return nil, err
		}
		fenv.exe = exe
	}
	gnetBin := ""
	if len(c.Peers) > 0 {
		if gnetBin = c.GnetSink; gnetBin == "" {
			if gnetBin, err = peers.BuildGnet(ctx, ios); err != nil {
				return nil, err
			}
		}
		fenv.gnetSink = gnetBin
	}
	tlsFiles, rmTLS, err := startTLSRun(c)
	if err != nil {
		return nil, err
	}
	defer rmTLS()
	pin, unpin := bench.PinApart(c.Pin)
	defer unpin()
	fenv.cpus, fenv.sinkCPUs = pin.GenCPUs, runtime.GOMAXPROCS(0)
	wire, wireWhy, closeWire, err := c.openWire(ctx, pin, ios)
	if err != nil {
		return nil, err
	}
	// Deferred, so that an error, a signal (which cancels ctx) or a panic
	// on this goroutine tears the namespaces down.
	defer closeWire()
	fenv.wire = wire
	rep := &RunReport{Command: "run", Host: harness.HostInfo(), Pinning: pin, Wire: wire.Info(c.Wire, wireWhy), Skipped: skipped, OK: true,
		Config: runParams{Client: c.Client, Peers: c.Peers, Sources: c.Sources, DurationS: c.Duration.Seconds(), MsgSize: int64(c.MsgSize),
			RateBps: float64(c.Rate), Arrivals: c.Arrivals, Skew: c.Skew, Rounds: c.Rounds,
			Pool: c.Engine.Pool, Buf: int64(c.Engine.Buf), Workers: c.Engine.Workers, FlushNs: int64(c.Engine.Flush), Verify: c.Verify,
			Framing: harness.FramingName(framer), TLS: c.TLS, Inline: c.Engine.Inline, QuietEveryNs: int64(c.QuietSource)}}
	msgs := "messages"
	if framer != nil {
		msgs = framer.String() + " records"
		if c.Client == load.ClientGen {
			rep.Notes = append(rep.Notes, noLatencyNote)
		}
	}
	client := "the built-in generator"
	if c.Client == load.ClientGen && c.Rate > 0 {
		rep.Config.Pacing = bench.Workload{Pacing: c.GenPacing}.GenPacing()
	}
	if c.Client == load.ClientFio {
		rep.Config.RecordSize = int64(c.recordSize())
		client = "fio's net engine"
		msgs = "writes"
		if framer != nil {
			msgs = fmt.Sprintf("writes of %d-byte %s records", c.recordSize(), framer)
		}
		rep.Notes = append(rep.Notes, fioNote)
	}
	if len(c.Peers) > 0 && c.Client == load.ClientGen && framer == nil {
		rep.Notes = append(rep.Notes, gnetLatencyNote)
	}
	rows := c.tlsRows(append(slices.Clone(runners), c.Peers...))
	fmt.Fprintf(ios.Err, "sluice-bench run: %d sources, %s %s, rate %s per source, %v per row, rows %v, load from %s, %s; %s\n",
		c.Sources, report.FormatBytes(uint64(c.MsgSize)), msgs, bench.RateOrUnlimited(c.Rate), c.Duration, rows, client, bench.PinNote(pin), bench.WireNote(rep.Wire))
	byRunner := map[string][]*bench.Result{}
	failed := map[string]bool{}
	for round := range c.Rounds {
		order := slices.Clone(rows)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			if failed[name] {
				continue
			}
			w := bench.Workload{Runner: name, Round: round, Sources: c.Sources, Duration: c.Duration, MsgSize: c.MsgSize,
				Rate: c.Rate, Arrivals: c.Arrivals, Pacing: c.GenPacing, Skew: c.Skew, MaxDial: c.MaxDial, Verify: c.Verify,
				Engine: c.Engine, Exe: exe, GenCPUs: pin.GenCPUs, Profile: c.Profile, Label: name, Wire: wire}
			w = tlsWorkload(w, name, tlsFiles)
			if c.Rounds > 1 {
				w.Label = fmt.Sprintf("%s (round %d/%d)", name, round+1, c.Rounds)
			}
			var r *bench.Result
			switch {
			case c.Client == load.ClientFio:
				r, err = measureFio(ctx, c, fenv, name, round, ios)
			case peers.IsRow(name):
				r, err = measureGnet(ctx, w, gnetBin, ios)
			default:
				r, err = bench.MeasureRunner(ctx, w, ios, !c.InProcess)
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("bench: %s: %w", name, err)
				}
				// One runner failing under the load is a result, not the
				// end of the comparison.
				fmt.Fprintf(ios.Err, "sluice-bench: %s failed: %v\n", name, err)
				failed[name] = true
				rep.Failed = append(rep.Failed, bench.Skipped{Runner: name, Reason: err.Error()})
				continue
			}
			recs := ""
			if framer != nil {
				recs = fmt.Sprintf(", %s records (%s records/s)", humanize.Comma(int64(r.Records)), humanize.Comma(int64(r.RecordsPerS)))
			}
			core := ""
			if r.CoreCPUS > 0 {
				core = fmt.Sprintf(" (sink process), %.3f whole core (%.3f softirq), load core %.3f", r.CoreCPUSPerGiB, r.CoreSoftirqSPerGiB, r.LoadCoreCPUSPerGiB)
			}
			fmt.Fprintf(ios.Err, "%s: %s in %.2fs, %s, %.3f CPU-s/GiB%s%s\n", w.Label, report.FormatBytes(r.Bytes), r.DurationS,
				report.FormatRate(r.ThroughputBps), r.CPUSPerGiB, core, recs)
			for _, m := range r.Mismatches {
				fmt.Fprintf(ios.Err, "MISMATCH %s: %s\n", name, m)
			}
			if r.Profile != "" {
				report.WriteTop(ios.Out, w.Label, r.Profile, r.TopFunctions)
			}
			rep.Runs = append(rep.Runs, r)
			byRunner[name] = append(byRunner[name], r)
		}
		if c.IPerf3 {
			r, err := measureIPerf3(ctx, c.Duration, pin.GenCPUs, round)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				fmt.Fprintf(ios.Err, "sluice-bench: %v\n", err)
				c.IPerf3 = false
				rep.Skipped = append(rep.Skipped, bench.Skipped{Runner: RunnerIPerf3, Reason: err.Error()})
				continue
			}
			fmt.Fprintf(ios.Err, "%s (round %d/%d): %s in %.2fs, %s\n", RunnerIPerf3, round+1, c.Rounds, report.FormatBytes(r.Bytes), r.DurationS, report.FormatRate(r.ThroughputBps))
			rep.Runs = append(rep.Runs, r)
			byRunner[RunnerIPerf3] = append(byRunner[RunnerIPerf3], r)
		}
	}
	if len(rep.Failed) == len(rows) {
		return nil, fmt.Errorf("bench: every row failed; the first: %s", rep.Failed[0].Reason)
	}
	for _, name := range append(slices.Clone(rows), RunnerIPerf3) {
		if len(byRunner[name]) == 0 {
			continue
		}
		s := bench.MergeResults(byRunner[name])
		rep.Summary = append(rep.Summary, s)
		rep.OK = rep.OK && s.Verified
	}
	var measured []string
	for _, s := range rep.Summary {
		measured = append(measured, s.Runner)
	}
	rep.Ratios = bench.CompareRounds(measured, rep.Runs)
	if slices.Contains(measured, peers.GoTLS) && slices.Contains(measured, peers.Go) {
		// What TLS costs Go's own sink: the floor under RowTLS's ratio.
		rep.Ratios = append(rep.Ratios, bench.CompareRounds([]string{peers.GoTLS, peers.Go}, rep.Runs)...)
	}
	rep.Verdicts = bench.Judge(c.Targets, rep.Ratios, wire.Veth())
	rep.Notes = append(rep.Notes, c.tlsNotes(rep.Runs)...)
	if share, ok := harness.CPUShareSince(cpu); ok {
		if n := harness.BusyNote(share, rep.Host.CPUs); n != "" {
			rep.Notes = append(rep.Notes, n)
		}
	}
	fmt.Fprintln(ios.Out)
	writeRunTable(ios.Out, rep)
	if err := writeOutputs(rep, c.JSON, c.Plot, ios); err != nil {
		return rep, err
	}
	if !rep.OK {
		fmt.Fprintln(ios.Err, "sluice-bench run: FAILED: a sink did not receive exactly what the client sent (see MISMATCH lines)")
		return rep, bench.ErrMismatch
	}
	return rep, nil
}

// openWire sets up c's wire between the engine's and the generator's
// CPUs, with its teardown, and why auto fell back to loopback.
func (c RunConfig) openWire(ctx context.Context, pin bench.Pinning, ios harness.IO) (harness.WireEnv, string, func(), error) {
	if c.Wire == harness.WireAuto && c.InProcess {
		why := "--in-process hosts the sink in this process, outside a sink namespace"
		fmt.Fprintf(ios.Err, "sluice-bench: wire: loopback: %s\n", why)
		return harness.WireEnv{Mode: harness.WireLoopback, SinkCPUs: pin.EngineCPUs, LoadCPUs: pin.GenCPUs}, why, func() {}, nil
	}
	return harness.OpenWire(ctx, c.Wire, pin.EngineCPUs, pin.GenCPUs, ios.Err)
}

// writeOutputs writes the JSON report and the charts.
func writeOutputs(rep *RunReport, jsonPath, plotDir string, ios harness.IO) error {
	if jsonPath != "" {
		if err := harness.WriteJSON(jsonPath, rep, ios); err != nil {
			return err
		}
	}
	if plotDir != "" {
		return writeRunPlots(plotDir, rep, ios)
	}
	return nil
}
