package arrivals

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/bench/report"
)

// ArrivalsConfig configures the `arrivals` command: how the messages of a
// paced load reach a sink, under the built-in generator and under fio.
//
// A probe sink (not the engine) reads every connection with recvmsg and
// SO_TIMESTAMPNS, one message at a time, so each message carries the
// kernel's receive timestamp of its segment. On loopback that stamp is
// taken when the sender's write hands the segment to the loopback device,
// before any receiver runs: the arrivals are the senders' own, whatever
// the sink does. Two messages with one stamp came in one segment: the
// sender coalesced them into one write.
type ArrivalsConfig struct {
	Clients report.StringList // gen, fio
	// Sinks are what the load is sent to: SinkProbe, a runner, or
	// peers.Gnet. Every sink but the probe needs the packet capture.
	Sinks    report.StringList
	Engine   harness.EngineFlags
	GnetSink string
	Sources  int
	Duration time.Duration
	MsgSize  report.Size
	Rate     report.Rate // per source
	Arrivals string
	// GenPacing is the built-in generator's pacing (GenConfig.Pacing).
	GenPacing string
	MaxDial   int
	Pin       bool
	JSON      string
	Plot      string
	Exe       string
}

// DefaultArrivalsConfig returns the documented defaults: the paced row of
// the targets, 1,000 sources at 64 KiB/s in 1 KiB messages, for 3 s.
func DefaultArrivalsConfig() ArrivalsConfig {
	return ArrivalsConfig{Clients: report.StringList{load.ClientGen, load.ClientFio}, Sinks: report.StringList{SinkProbe}, Sources: 1000, Duration: 3 * time.Second,
		MsgSize: 1 << 10, Rate: 64 << 10, Arrivals: load.ArrivalsPoisson, MaxDial: load.DefaultMaxDial, Pin: true}
}

// RegisterFlags defines c's flags on fs.
func (c *ArrivalsConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Clients, "clients", "comma-separated clients to compare: gen (the built-in generator), fio (default both)")
	fs.Var(&c.Sinks, "sinks", "comma-separated sinks to send to: probe (a plain reader), a runner (uring, epoll, goroutine, thread) or gnet; "+
		"all but probe need the packet capture (root or CAP_NET_RAW) (default probe)")
	fs.StringVar(&c.GnetSink, "gnet-sink", c.GnetSink, "the gnet sink's binary (default: go build bench/gnetsink into the user cache directory)")
	c.Engine.Register(fs)
	fs.IntVar(&c.Sources, "sources", c.Sources, "concurrent TCP sources")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long each client sends")
	fs.Var(&c.MsgSize, "msg-size", "message size: one write of fio, one message of the generator (default 1KiB)")
	fs.Var(&c.Rate, "rate", "mean bytes per second per source (default 64KiB/s)")
	fs.StringVar(&c.Arrivals, "arrivals", c.Arrivals, "poisson or uniform")
	fs.StringVar(&c.GenPacing, "gen-pacing", c.GenPacing, "the generator's pacing: "+load.PacingHelp+" (default "+load.DefaultPacing+")")
	fs.IntVar(&c.MaxDial, "max-dial", c.MaxDial, "concurrent dials of the generator")
	fs.BoolVar(&c.Pin, "pin", c.Pin, "pin the probe and the client to disjoint CPUs")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.Plot, "plot", c.Plot, "write charts of the gaps between arrivals into `DIR`")
}

// Validate checks c, naming the flag at fault.
func (c ArrivalsConfig) Validate() error {
	if len(c.Clients) == 0 {
		return errors.New("--clients: at least one is needed")
	}
	for _, cl := range c.Clients {
		if cl != load.ClientGen && cl != load.ClientFio {
			return fmt.Errorf("--clients: %q: must be gen or fio", cl)
		}
	}
	if len(c.Sinks) == 0 {
		return errors.New("--sinks: at least one is needed")
	}
	for _, s := range c.Sinks {
		if s != SinkProbe && s != peers.Gnet && !slices.Contains(harness.AllRunners(), s) {
			return fmt.Errorf("--sinks: %q: must be probe, uring, epoll, goroutine, thread or gnet", s)
		}
	}
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	switch {
	case c.Rate <= 0:
		return errors.New("--rate: must be positive (arrivals of an unpaced load are the sink's to pace)")
	case c.Sources > load.FioMaxJobs && slices.Contains(c.Clients, load.ClientFio):
		return fmt.Errorf("--sources: %d: fio runs at most %d jobs", c.Sources, load.FioMaxJobs)
	}
	g := load.GenConfig{Addr: "-", Sources: c.Sources, Duration: c.Duration, MsgSize: c.MsgSize, Rate: c.Rate,
		Arrivals: c.Arrivals, MaxDial: c.MaxDial, Pacing: c.GenPacing}
	return g.Validate()
}

// Gaps summarises gaps between arrivals, in nanoseconds.
type Gaps struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	// CV is the coefficient of variation, stddev over mean: 1 for the
	// exponential gaps of a Poisson process, above 1 for bursts.
	CV  float64 `json:"cv"`
	P10 int64   `json:"p10"`
	P50 int64   `json:"p50"`
	P90 int64   `json:"p90"`
	P99 int64   `json:"p99"`
	// Under is the fraction of gaps shorter than BackToBack.
	Under float64 `json:"under_back_to_back"`
}

// BackToBack is the gap below which two arrivals count as back to back:
// about what one more write costs a sender that does not sleep between
// them.
const BackToBack = 5 * time.Microsecond

// Dispersion is the index of dispersion (variance over mean) of the
// arrivals counted in windows of one length: 1 for a Poisson process, far
// above 1 when they come in bursts.
type Dispersion struct {
	WindowNs int64   `json:"window_ns"`
	Mean     float64 `json:"mean"`
	Index    float64 `json:"index"`
}

// ArrivalStats is what one client's load looked like at the probe.
type ArrivalStats struct {
	Client   string `json:"client"`
	Pacing   string `json:"pacing,omitempty"` // the generator's
	Sink     string `json:"sink"`
	Sources  int    `json:"sources"`
	Messages int64  `json:"messages"`
	// Segments counts distinct receive stamps per connection; Coalesced
	// is the fraction of messages that shared their segment with another
	// message of the same connection (one write of several messages).
	Segments  int64   `json:"segments"`
	Coalesced float64 `json:"coalesced"`
	// SegmentBytes is the mean payload of a segment, and SegmentsPerS
	// the segments of all connections a second: what a sink has to wake
	// up for.
	SegmentBytes float64 `json:"segment_bytes"`
	SegmentsPerS float64 `json:"segments_per_s"`
	// PerConn are the gaps between one connection's segments, every
	// connection's pooled; Merged the gaps between consecutive segments of
	// all connections together, what a sink that serves them all sees.
	PerConn Gaps `json:"per_conn_gap_ns"`
	Merged  Gaps `json:"merged_gap_ns"`
	// ConnCDF and MergedCDF are the gaps at the quantiles 0.01 to 0.99,
	// for the charts.
	ConnCDF    []int64      `json:"conn_cdf_ns"`
	MergedCDF  []int64      `json:"merged_cdf_ns"`
	Dispersion []Dispersion `json:"dispersion"`
	// ReaderLagP99 is how long after its stamp the probe read a message
	// (p99): small when the probe kept up, so that segments were not
	// merged in its receive queues.
	ReaderLagP99 int64 `json:"reader_lag_p99_ns"`
	// Method is how the probe stamped the segments: "packet capture" or
	// "stamped reads" (see arrivalProbe); Drops the packets the capture
	// had no room for.
	Method      string  `json:"method"`
	Drops       uint32  `json:"drops"`
	OfferedBps  float64 `json:"offered_bps"`
	ReceivedBps float64 `json:"received_bps"`
}

// ArrivalsReport is the JSON report of `arrivals`: the Poisson reference
// (what independent senders would make), then one entry per client.
type ArrivalsReport struct {
	Command string         `json:"command"` // "arrivals"
	Host    harness.Host   `json:"host"`
	Pinning bench.Pinning  `json:"pinning"`
	Poisson ArrivalStats   `json:"poisson"`
	Clients []ArrivalStats `json:"clients"`
}

// arrival is one read of the probe: a connection's segment, or the part
// of one that fits a message.
type arrival struct {
	ts   int64 // the kernel's receive stamp, UnixNano
	read int64 // when the read returned, UnixNano
	n    int32 // bytes read
}

// dispersionWindows are the window lengths of Dispersion.
var dispersionWindows = []time.Duration{20 * time.Microsecond, 100 * time.Microsecond, time.Millisecond}

// ArrivalsStudy runs the `arrivals` command.
func ArrivalsStudy(ctx context.Context, c ArrivalsConfig, ios harness.IO) (*ArrivalsReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	exe, err := bench.Executable(c.Exe)
	if err != nil {
		return nil, err
	}
	fioBin := ""
	if slices.Contains(c.Clients, load.ClientFio) {
		if fioBin, err = load.FindFio(); err != nil {
			return nil, err
		}
	}
	gnetBin := c.GnetSink
	if slices.Contains(c.Sinks, peers.Gnet) && gnetBin == "" {
		if gnetBin, err = peers.BuildGnet(ctx, ios); err != nil {
			return nil, err
		}
	}
	pin, unpin := bench.PinApart(c.Pin)
	defer unpin()
	rep := &ArrivalsReport{Command: "arrivals", Host: harness.HostInfo(), Pinning: pin,
		Poisson: poissonReference(c.Sources, float64(c.Rate), int(c.MsgSize))}
	env := arrivalsEnv{exe: exe, fio: fioBin, gnet: gnetBin, cpus: pin.GenCPUs}
	for _, sink := range c.Sinks {
		for _, cl := range c.Clients {
			st, err := watchArrivals(ctx, c, cl, sink, env, ios)
			if err != nil {
				return nil, fmt.Errorf("bench: arrivals from %s at %s: %w", cl, sink, err)
			}
			rep.Clients = append(rep.Clients, *st)
		}
	}
	writeArrivalsTable(ios.Out, rep)
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	if c.Plot != "" {
		if err := writeArrivalsPlots(c.Plot, rep, ios); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// arrivalsEnv is what every measurement of `arrivals` shares.
type arrivalsEnv struct {
	exe, fio, gnet string
	cpus           []int // the client's
}

// watchArrivals sends one client's load to one sink and analyses what came.
func watchArrivals(ctx context.Context, c ArrivalsConfig, client, sinkName string, env arrivalsEnv, ios harness.IO) (*ArrivalStats, error) {
	// The capture needs the port before the first segment, and the probe
	// reads stamps itself only when there is no capture: the probe is
	// started on a port the capture then watches, a runner's or gnet's
	// sink likewise.
	var capErr error
	sink, probe, err := startArrivalSink(ctx, sinkName, c, env.gnet, !captureAvailable(), ios)
	if err != nil {
		return nil, err
	}
	defer sink.close()
	_, port, _ := net.SplitHostPort(sink.addr())
	pn, _ := strconv.Atoi(port)
	cp, capErr := startCapture(pn)
	if capErr != nil && (probe == nil || !probe.stamped) {
		return nil, fmt.Errorf("the %s sink needs the packet capture: %w", sinkName, capErr)
	}
	if cp != nil {
		defer cp.finish()
	}
	fmt.Fprintf(ios.Err, "sluice-bench arrivals: %s into %s, %d sources at %s in %s messages for %v\n",
		client, sinkName, c.Sources, report.FormatRate(float64(c.Rate)), report.FormatBytes(uint64(c.MsgSize)), c.Duration)
	st := &ArrivalStats{Client: client, Sink: sinkName, Sources: c.Sources, OfferedBps: float64(c.Rate) * float64(c.Sources)}
	switch client {
	case load.ClientGen:
		w := bench.Workload{Sources: c.Sources, Duration: c.Duration, MsgSize: c.MsgSize, Rate: c.Rate, Arrivals: c.Arrivals,
			MaxDial: c.MaxDial, Exe: env.exe, GenCPUs: env.cpus, Pacing: c.GenPacing, Verify: true}
		st.Pacing = w.GenPacing()
		g, err := bench.StartGen(ctx, w, sink.addr(), nil, ios)
		if err != nil {
			return nil, err
		}
		defer g.Kill()
		if err := sink.waitAccepted(ctx, c.Sources, bench.DialLimit(c.Sources)); err != nil {
			return nil, err
		}
		if err := g.Send(); err != nil {
			return nil, err
		}
		for l := range g.Lines {
			if _, err := bench.DecodeGenReport(l); err != nil {
				return nil, err
			}
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	case load.ClientFio:
		dir, err := os.MkdirTemp("", "sluice-bench-arrivals-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		job := load.FioJob{Addr: sink.addr(), Sources: c.Sources, Duration: c.Duration, BS: int(c.MsgSize), Rate: float64(c.Rate),
			Arrivals: c.Arrivals, NoDelay: true, CPUs: env.cpus}
		jobFile := filepath.Join(dir, "job.fio")
		if err := os.WriteFile(jobFile, []byte(job.File()), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, env.fio, "--output-format=json", "--output="+filepath.Join(dir, "fio.json"), jobFile)
		out := &harness.TailBuffer{Max: 16 << 10}
		cmd.Stdout, cmd.Stderr = lineWriter{out}, lineWriter{out}
		// fio's jobs connect one by one as they start, and on a busy
		// machine the first may end before the last connects: its exit,
		// not its connections, says when the load is over.
		if err := harness.StartOnCPUs(cmd, env.cpus); err != nil {
			return nil, err
		}
		if err := cmd.Wait(); err != nil {
			return nil, fmt.Errorf("fio: %w\n%s", err, out)
		}
	}
	if err := sink.waitEnded(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	var conns [][]arrival
	if cp != nil {
		segs, drops, err := cp.finish()
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		cp = nil
		conns = segmentsByConn(segs)
		st.Method, st.Drops = "packet capture", drops
		if drops > 0 {
			fmt.Fprintf(ios.Err, "sluice-bench arrivals: the capture dropped %d packets\n", drops)
		}
	} else {
		conns = probe.stamps()
		st.Method = "stamped reads"
		fmt.Fprintf(ios.Err, "sluice-bench arrivals: no packet capture (%v): the stamps come from reads, right only while the probe kept up (reader lag)\n", capErr)
	}
	analyseArrivals(st, conns, int(c.MsgSize))
	return st, nil
}

// segmentsByConn groups captured segments by connection (source port),
// each in the order captured.
func segmentsByConn(segs []segment) [][]arrival {
	by := map[uint16]int{}
	var out [][]arrival
	for _, s := range segs {
		i, ok := by[s.sport]
		if !ok {
			i = len(out)
			by[s.sport] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], arrival{ts: s.ts, read: s.ts, n: s.n})
	}
	return out
}

// lineWriter adds what is written to a TailBuffer, a line at a time.
type lineWriter struct{ t *harness.TailBuffer }

func (w lineWriter) Write(p []byte) (int, error) {
	w.t.Add(string(p))
	return len(p), nil
}

// analyseArrivals fills st from every connection's reads, each in the
// order read.
func analyseArrivals(st *ArrivalStats, conns [][]arrival, msgSize int) {
	var perConn, merged, lags []int64
	var stamps []int64
	var first, last int64 = math.MaxInt64, 0
	var bytes, coalesced int64
	for _, as := range conns {
		prev := int64(0)
		var segBytes int64
		flush := func() {
			if segBytes > int64(msgSize) {
				coalesced += segBytes / int64(msgSize)
			}
			segBytes = 0
		}
		for _, a := range as {
			bytes += int64(a.n)
			lags = append(lags, a.read-a.ts)
			if a.ts == prev {
				segBytes += int64(a.n)
				continue
			}
			flush()
			segBytes = int64(a.n)
			if prev != 0 {
				perConn = append(perConn, a.ts-prev)
			}
			prev = a.ts
			stamps = append(stamps, a.ts)
			first, last = min(first, a.ts), max(last, a.ts)
		}
		flush()
	}
	slices.Sort(stamps)
	for i := 1; i < len(stamps); i++ {
		merged = append(merged, stamps[i]-stamps[i-1])
	}
	st.Messages = bytes / int64(msgSize)
	st.Segments = int64(len(stamps))
	if st.Segments > 0 {
		st.SegmentBytes = float64(bytes) / float64(st.Segments)
	}
	if st.Messages > 0 {
		st.Coalesced = float64(coalesced) / float64(st.Messages)
	}
	st.PerConn, st.Merged = gapStats(perConn), gapStats(merged) // sorts them
	st.ConnCDF, st.MergedCDF = quantilesOf(perConn), quantilesOf(merged)
	slices.Sort(lags)
	if len(lags) > 0 {
		st.ReaderLagP99 = lags[len(lags)*99/100]
	}
	if last > first {
		st.ReceivedBps = float64(bytes) / time.Duration(last-first).Seconds()
		st.SegmentsPerS = float64(st.Segments) / time.Duration(last-first).Seconds()
		// Leave out the first and last tenth: connections start and stop
		// one by one there.
		lo, hi := first+(last-first)/10, last-(last-first)/10
		for _, w := range dispersionWindows {
			st.Dispersion = append(st.Dispersion, dispersion(stamps, lo, hi, w.Nanoseconds()))
		}
	}
}

// gapStats summarises gaps.
func gapStats(gs []int64) Gaps {
	if len(gs) == 0 {
		return Gaps{}
	}
	slices.Sort(gs)
	var sum, sq float64
	under := 0
	for _, g := range gs {
		sum += float64(g)
		sq += float64(g) * float64(g)
		if g < BackToBack.Nanoseconds() {
			under++
		}
	}
	n := float64(len(gs))
	mean := sum / n
	q := func(p float64) int64 { return gs[min(len(gs)-1, int(p*n))] }
	return Gaps{Count: int64(len(gs)), Mean: mean, CV: math.Sqrt(max(sq/n-mean*mean, 0)) / mean,
		P10: q(0.10), P50: q(0.50), P90: q(0.90), P99: q(0.99), Under: float64(under) / n}
}

// dispersion counts the sorted stamps in [lo, hi) in windows of w ns.
func dispersion(stamps []int64, lo, hi, w int64) Dispersion {
	n := int((hi - lo) / w)
	if n < 2 {
		return Dispersion{WindowNs: w}
	}
	counts := make([]float64, n)
	for _, t := range stamps {
		if t >= lo && t < lo+int64(n)*w {
			counts[(t-lo)/w]++
		}
	}
	var sum, sq float64
	for _, x := range counts {
		sum += x
		sq += x * x
	}
	mean := sum / float64(n)
	d := Dispersion{WindowNs: w, Mean: mean}
	if mean > 0 {
		d.Index = (sq/float64(n) - mean*mean) / mean
	}
	return d
}

// poissonReference is what n independent Poisson senders of size-byte
// messages at rate bytes per second each make: exponential gaps per
// connection and merged, and an index of dispersion of 1.
func poissonReference(n int, rate float64, size int) ArrivalStats {
	mean := float64(size) / rate * 1e9 // ns between one sender's messages
	exp := func(m float64) Gaps {
		q := func(p float64) int64 { return int64(-math.Log(1-p) * m) }
		return Gaps{Mean: m, CV: 1, P10: q(0.10), P50: q(0.50), P90: q(0.90), P99: q(0.99),
			Under: 1 - math.Exp(-float64(BackToBack.Nanoseconds())/m)}
	}
	st := ArrivalStats{Client: "poisson", Sources: n, PerConn: exp(mean), Merged: exp(mean / float64(n)),
		ConnCDF: expQuantiles(mean), MergedCDF: expQuantiles(mean / float64(n)),
		OfferedBps: rate * float64(n), ReceivedBps: rate * float64(n), SegmentBytes: float64(size), SegmentsPerS: rate * float64(n) / float64(size)}
	for _, w := range dispersionWindows {
		st.Dispersion = append(st.Dispersion, Dispersion{WindowNs: w.Nanoseconds(), Mean: float64(w.Nanoseconds()) / mean * float64(n), Index: 1})
	}
	return st
}

func writeArrivalsTable(w io.Writer, rep *ArrivalsReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "client\tsink\treceived\tsegments/s\tsegment\tcoalesced\tconn gap mean\tCV\tp50\tp99\tmerged gap mean\tCV\tp10\tp50\tp90\t< 5µs\t")
	for _, d := range rep.Poisson.Dispersion {
		fmt.Fprintf(tw, "disp %s\t", report.FormatNanos(d.WindowNs))
	}
	fmt.Fprint(tw, "reader lag p99\t\n")
	row := func(st ArrivalStats) {
		name := st.Client
		if st.Pacing != "" {
			name += " (" + st.Pacing + ")"
		}
		lag := "-"
		if st.Method == "stamped reads" {
			lag = report.FormatNanos(st.ReaderLagP99)
		}
		sink := st.Sink
		if sink == "" {
			sink = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f%%\t%s\t%.2f\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%.0f%%\t", name, sink, report.FormatRate(st.ReceivedBps),
			humanize.Comma(int64(st.SegmentsPerS)), report.FormatBytes(uint64(st.SegmentBytes)), 100*st.Coalesced, report.FormatNanos(int64(st.PerConn.Mean)), st.PerConn.CV, report.FormatNanos(st.PerConn.P50), report.FormatNanos(st.PerConn.P99),
			report.FormatNanos(int64(st.Merged.Mean)), st.Merged.CV, report.FormatNanos(st.Merged.P10), report.FormatNanos(st.Merged.P50),
			report.FormatNanos(st.Merged.P90), 100*st.Merged.Under)
		for _, d := range st.Dispersion {
			fmt.Fprintf(tw, "%.2f\t", d.Index)
		}
		fmt.Fprintf(tw, "%s\t\n", lag)
	}
	row(rep.Poisson)
	for _, st := range rep.Clients {
		row(st)
	}
	tw.Flush()
	fmt.Fprintf(w, "segment: mean payload of a TCP segment; coalesced: messages that shared a segment; conn gap: between one connection's segments; "+
		"merged gap: between consecutive segments of all connections; disp W: variance over mean of the segments counted in windows of W (Poisson: 1)\n")
	fmt.Fprintf(w, "kernel %s, %s; %s\n", rep.Host.Kernel, rep.Host.Go, bench.PinNote(rep.Pinning))
}
