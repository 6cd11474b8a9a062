package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
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

// UDP rows of `run` (--proto udp): fio's net engine, or the bench's own
// UDP generator (udpgen.go), sends fixed-size datagrams from the load's
// side of the wire to one UDP port on the sink's, and a row is what the
// sink delivered of what the load sent. A
// datagram the sink is too slow for is dropped by the kernel when the
// socket's receive buffer is full, so a row's figures are the delivered
// fraction, where the rest went (the socket's drop counter, and the sink
// namespace's Udp counters from /proc/net/snmp), and the cost per
// datagram delivered. A list of rates is a sweep: each row is measured at
// each rate in turn until it loses more than --udp-max-loss.

// udpMaxSenders bounds --sources with --proto udp --client fio: each is
// a fio thread on the load's CPU.
const udpMaxSenders = 64

// fioUDPMessages is how many small datagrams each fio UDP job sends besides
// its load: an open message as it starts and a close message as it ends
// (engines/net.c, struct udp_close_msg), 8 bytes each.
const fioUDPMessages = 2

// DefaultUDPMaxLoss is the sweep's pass mark: a rate is sustained when a
// row's median loss there is at most this fraction.
const DefaultUDPMaxLoss = 0.001

// DatagramRates is a flag's comma-separated datagrams per second, each a
// number with an optional k (thousands) or M (millions) suffix.
type DatagramRates []float64

func (r *DatagramRates) String() string {
	if r == nil {
		return ""
	}
	s := make([]string, len(*r))
	for i, v := range *r {
		s[i] = strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strings.Join(s, ",")
}

// Set parses a comma-separated list of rates.
func (r *DatagramRates) Set(v string) error {
	var out DatagramRates
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		mult := 1.0
		switch {
		case strings.HasSuffix(f, "k"):
			f, mult = strings.TrimSuffix(f, "k"), 1e3
		case strings.HasSuffix(f, "M"):
			f, mult = strings.TrimSuffix(f, "M"), 1e6
		}
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || x <= 0 {
			return fmt.Errorf("%q: want datagrams per second above 0, e.g. 200000 or 200k", f)
		}
		out = append(out, x*mult)
	}
	*r = out
	return nil
}

// validateUDP checks a run with --proto udp, or that a TCP run sets no UDP
// flag.
func (c RunConfig) validateUDP() error {
	switch c.Proto {
	case load.ProtoTCP:
		if len(c.UDPRates) > 0 {
			return errors.New("--udp-rate: only with --proto udp (--rate sets the TCP sources' bytes per second)")
		}
		return nil
	case load.ProtoUDP:
	default:
		return fmt.Errorf("--proto: %q: must be tcp or udp", c.Proto)
	}
	f, err := c.Engine.Framer()
	if err != nil {
		return err
	}
	pc, err := c.Engine.PoolConfig()
	if err != nil {
		return err
	}
	switch {
	case c.Client != load.ClientFio && c.Client != load.ClientGen:
		return fmt.Errorf("--client: %q: must be gen or fio", c.Client)
	case slices.Contains(c.Peers, peers.Epoll):
		return errors.New("--peers epoll: the bare epoll loop reads TCP only; with --proto udp the peers are go and gnet")
	case c.MsgSize < 1 || int(c.MsgSize) > srcs.MaxUDPPayload:
		return fmt.Errorf("--msg-size: %d: a UDP datagram holds from 1 to %d bytes", c.MsgSize, srcs.MaxUDPPayload)
	case int(c.MsgSize) > pc.BufSize-srcs.DatagramHeaderLen:
		return fmt.Errorf("--msg-size: a %d-byte datagram and its %d-byte header do not fit a %d-byte pool buffer (--buf)",
			c.MsgSize, srcs.DatagramHeaderLen, pc.BufSize)
	case c.Client == load.ClientFio && (c.Sources < 1 || c.Sources > udpMaxSenders):
		return fmt.Errorf("--sources: %d: with --proto udp --client fio each source is a fio thread sending on the load's CPU: from 1 to %d (say 4)",
			c.Sources, udpMaxSenders)
	case c.Sources < 1 || c.Sources > load.UDPGenMaxSenders:
		return fmt.Errorf("--sources: %d: with --proto udp --client gen each source is a socket: from 1 to %d", c.Sources, load.UDPGenMaxSenders)
	case c.Rate != 0:
		return errors.New("--rate: with --proto udp, give --udp-rate: datagrams per second over all sources")
	case f != nil:
		return fmt.Errorf("--framing %s: a UDP row counts datagrams, not records", f)
	case c.TLS:
		return errors.New("--tls: not with --proto udp")
	case c.IPerf3:
		return errors.New("--iperf3: not with --proto udp (its row is one TCP stream)")
	case c.InProcess:
		return errors.New("--in-process: not with --proto udp (every UDP sink runs in a process of its own)")
	case len(c.Targets) > 0:
		return errors.New("--target: not with --proto udp; a --udp-rate sweep finds the rate each sink sustains")
	case c.Plot != "":
		return errors.New("--plot: not with --proto udp (the JSON report has every round)")
	case c.Profile != "":
		return errors.New("--profile: not with --proto udp")
	case c.UDPReadBuffer < 0 || c.UDPReadBuffer > 1<<30:
		return fmt.Errorf("--udp-read-buffer: %d: must be from 0 to 1GiB", c.UDPReadBuffer)
	case c.UDPMaxLoss < 0 || c.UDPMaxLoss >= 1:
		return fmt.Errorf("--udp-max-loss: %v: must be a fraction from 0 to below 1", c.UDPMaxLoss)
	}
	for i, r := range c.UDPRates {
		if i > 0 && r <= c.UDPRates[i-1] {
			return fmt.Errorf("--udp-rate: %v: a sweep's rates must rise", c.UDPRates.String())
		}
		if r*float64(c.MsgSize) < float64(c.Sources) {
			return fmt.Errorf("--udp-rate: %v: under one byte per second per fio job", r)
		}
	}
	if c.Client == load.ClientGen {
		switch {
		case c.GenPacing != "":
			return errors.New("--gen-pacing: the UDP generator sends what has come due every millisecond")
		case c.Skew != 0:
			return errors.New("--skew: the UDP generator's senders take turns")
		case c.Arrivals != load.ArrivalsPoisson && c.Arrivals != "":
			return errors.New("--arrivals: the UDP generator sends what has come due every millisecond")
		}
		return nil
	}
	return c.validateClient()
}

// udpJob is fio's job for a UDP row: Sources jobs sending
// size-byte datagrams to addr, at dps datagrams per second over them all
// (0: flat out).
func udpJob(addr string, c RunConfig, dps float64, cpus []int) load.FioJob {
	j := load.FioJob{Proto: load.ProtoUDP, Addr: addr, Sources: c.Sources, Duration: c.Duration, BS: int(c.MsgSize), Arrivals: c.Arrivals, CPUs: cpus}
	if dps > 0 {
		j.Rate = dps * float64(c.MsgSize) / float64(c.Sources)
	}
	return j
}

// udpSent is what a UDP load says it sent.
type udpSent struct {
	Datagrams uint64  // of the load's size
	Control   uint64  // small messages besides (fio's open and close)
	Seconds   float64 // the longest sender's time sending
	Errors    []string
}

// fioUDPSent is what fio's report says its UDP jobs sent.
func fioUDPSent(fr *load.FioReport) udpSent {
	s := udpSent{Control: fioUDPMessages * uint64(len(fr.Jobs))}
	var ms int64
	for _, j := range fr.Jobs {
		s.Datagrams += j.Write.TotalIOs
		ms = max(ms, j.JobRuntime)
		if j.Error != 0 {
			s.Errors = append(s.Errors, fmt.Sprintf("fio job %s: error %d", j.Name, j.Error))
		}
	}
	s.Seconds = float64(ms) / 1e3
	return s
}

// genUDPSent is what the UDP generator says it sent. A datagram the
// kernel refused was not sent, and is no mismatch.
func genUDPSent(g *load.UDPGenReport) udpSent {
	return udpSent{Datagrams: g.Sent, Seconds: g.Secs}
}

// UDPResult is one UDP row in one round at one offered rate.
type UDPResult struct {
	Runner string `json:"runner"`
	Round  int    `json:"round"`
	// RateDps is the offered rate asked for, datagrams per second over
	// every fio job; 0: flat out.
	RateDps      float64 `json:"rate_dps"`
	DatagramSize int     `json:"datagram_size"`
	// Offered is the datagrams fio sent (its total_ios), and OfferedDps
	// them over the longest job's runtime.
	Offered    uint64  `json:"offered"`
	OfferedDps float64 `json:"offered_dps"`
	// Delivered is the datagrams of the load's size the sink received, and
	// Others those of any other size (fio's open and close messages).
	Delivered    uint64  `json:"delivered"`
	Others       uint64  `json:"other_datagrams"`
	DeliveredDps float64 `json:"delivered_dps"`
	// DeliveredFraction is Delivered over Offered; Lost is Offered less
	// Delivered.
	DeliveredFraction float64 `json:"delivered_fraction"`
	Lost              uint64  `json:"lost"`
	LostFraction      float64 `json:"lost_fraction"`
	// SocketDrops is the kernel's drop counter of the sink's socket, -1
	// when unknown.
	SocketDrops int64 `json:"socket_drops"`
	// SNMP is the growth of the sink namespace's Udp counters over the
	// row (on loopback, of the whole host's, other traffic included).
	SNMP harness.UDPMIB `json:"snmp"`
	// BeforeUDP is the datagrams fio sent that UDP never took in (lost on
	// the wire or in the receive backlog), from the counters, on the veth
	// wire only.
	BeforeUDP int64 `json:"before_udp"`
	// ReadBuffer is the sink's SO_RCVBUF as the kernel reports it.
	ReadBuffer int `json:"read_buffer"`
	// DurationS is from the first datagram delivered to the last: the
	// window of the CPU figures.
	DurationS float64 `json:"duration_s"`
	// SinkCPUS is the sink process's CPU over the window; CoreCPUS the
	// receiving core's whole busy time (CoreSoftirqS of it softirq).
	SinkCPUS     float64 `json:"sink_cpu_s"`
	CoreCPUS     float64 `json:"core_cpu_s,omitempty"`
	CoreSoftirqS float64 `json:"core_softirq_s,omitempty"`
	// Per million datagrams delivered.
	SinkSPerM float64 `json:"sink_cpu_s_per_million"`
	CoreSPerM float64 `json:"core_cpu_s_per_million,omitempty"`
	// CoreUtil and LoadCoreUtil are the share of the window the receiving
	// and the load's cores were busy.
	CoreUtil     float64 `json:"core_util,omitempty"`
	LoadCoreUtil float64 `json:"load_core_util,omitempty"`
	// LoadCPUS is the CPU time of the load's process (fio, or udpgen).
	LoadCPUS    float64 `json:"load_cpu_s"`
	ThreadsMax  int     `json:"threads_max"`
	RSSMaxBytes int64   `json:"rss_max_bytes"`
	// Counters are the runner's (engine rows only), and DatagramsPerRead
	// the datagrams delivered per receive it made: the batching of
	// recvmmsg or of a multishot receive.
	Counters         *bench.Counters `json:"counters,omitempty"`
	DatagramsPerRead float64         `json:"datagrams_per_read,omitempty"`
	Wire             string          `json:"wire"`
	// Mismatches are the ways the counts do not add up; Verified is true
	// when there are none.
	Mismatches []string `json:"mismatches,omitempty"`
	Verified   bool     `json:"verified"`
}

// UDPSummary is one row at one rate over the rounds: medians and min-max.
type UDPSummary struct {
	Runner       string            `json:"runner"`
	RateDps      float64           `json:"rate_dps"`
	Rounds       int               `json:"rounds"`
	OfferedDps   bench.RatioSpread `json:"offered_dps"`
	DeliveredDps bench.RatioSpread `json:"delivered_dps"`
	Delivered    bench.RatioSpread `json:"delivered_fraction"`
	Lost         bench.RatioSpread `json:"lost_fraction"`
	SocketDrops  bench.RatioSpread `json:"socket_drops"`
	RcvbufErrors bench.RatioSpread `json:"rcvbuf_errors"`
	SinkSPerM    bench.RatioSpread `json:"sink_cpu_s_per_million"`
	CoreSPerM    bench.RatioSpread `json:"core_cpu_s_per_million"`
	CoreUtil     bench.RatioSpread `json:"core_util"`
	LoadCoreUtil bench.RatioSpread `json:"load_core_util"`
	// PerRead is the datagrams per receive of an engine row.
	PerRead  bench.RatioSpread `json:"datagrams_per_read"`
	Verified bool              `json:"verified"`
}

// UDPSustained is a sweep's verdict on one row: the highest rate asked
// for at which its median loss was at most the pass mark.
type UDPSustained struct {
	Runner string `json:"runner"`
	// RateDps is 0 when the row lost too much at the lowest rate.
	RateDps float64 `json:"rate_dps"`
	// OfferedDps is the median rate the load reached at RateDps. When it fell
	// short of what was asked (below MinHeld of it), LoadBound is set: the
	// row was not put to the rate asked for.
	OfferedDps float64 `json:"offered_dps,omitempty"`
	LoadBound  bool    `json:"load_bound,omitempty"`
	// FailedAt is the first rate at which it lost too much, 0 if none.
	FailedAt float64 `json:"failed_at_dps,omitempty"`
}

// step judges one rate of a sweep, s, the row's figures there: a rate
// whose median loss is at most maxLoss is sustained, and the first one
// that is not ends the row's sweep.
func (u *UDPSustained) step(s UDPSummary, maxLoss float64) {
	if u.FailedAt > 0 {
		return
	}
	if s.Lost.Median > maxLoss {
		u.FailedAt = s.RateDps
		return
	}
	u.RateDps, u.OfferedDps = s.RateDps, s.OfferedDps.Median
	u.LoadBound = s.OfferedDps.Median < bench.MinHeld*s.RateDps
}

// UDPRunReport is the JSON report of `run --proto udp`.
type UDPRunReport struct {
	Command string           `json:"command"` // "run"
	Proto   string           `json:"proto"`   // "udp"
	Host    harness.Host     `json:"host"`
	Pinning bench.Pinning    `json:"pinning"`
	Wire    harness.WireInfo `json:"wire"`
	Config  udpRunParams     `json:"config"`
	Runs    []*UDPResult     `json:"runs"`
	Summary []UDPSummary     `json:"summary"`
	// Sustained is set by a sweep (more than one --udp-rate).
	Sustained []UDPSustained  `json:"sustained,omitempty"`
	Skipped   []bench.Skipped `json:"skipped"`
	Failed    []bench.Skipped `json:"failed"`
	Notes     []string        `json:"notes,omitempty"`
	OK        bool            `json:"ok"` // every row's counts add up
}

type udpRunParams struct {
	Client       string    `json:"client"` // "fio" or "gen"
	Peers        []string  `json:"peers,omitempty"`
	Sources      int       `json:"sources"`
	DurationS    float64   `json:"duration_s"`
	DatagramSize int64     `json:"datagram_size"`
	RatesDps     []float64 `json:"rates_dps,omitempty"`
	Arrivals     string    `json:"arrivals"`
	ReadBuffer   int64     `json:"read_buffer"`
	MaxLoss      float64   `json:"max_loss"`
	Rounds       int       `json:"rounds"`
	Pool         int       `json:"pool"`
	Buf          int64     `json:"buf"`
	Workers      int       `json:"workers"`
	FlushNs      int64     `json:"flush_ns"`
	Inline       bool      `json:"inline,omitempty"`
}

// udpNote is the report's account of its figures.
const udpNote = "udp: offered is the datagrams the load sent (fio's total_ios, or those the generator's sockets took), " +
	"delivered those of the load's size the sink received; each fio job also sends an 8-byte open and close message, counted apart; socket drops is the kernel's per-socket counter " +
	"(/proc/net/udp), snmp the sink namespace's Udp counters; CPU figures are over the time from the first datagram delivered " +
	"to the last, per million delivered; the sink's job is to count each datagram and its bytes"

// ErrUDPAccounting reports that a UDP row's counts do not add up. The
// report has already been written when it is returned.
var ErrUDPAccounting = errors.New("bench: udp: delivered and dropped datagrams do not add up to those sent")

// RunUDP runs `run --proto udp`: every row at every rate, round by round,
// the table on ios.Out and the optional JSON.
func RunUDP(ctx context.Context, c RunConfig, ios harness.IO) (*UDPRunReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cpu := harness.MarkCPU() // what other processes use while it runs: see BusyNote
	exe, err := bench.Executable(c.Exe)
	if err != nil {
		return nil, err
	}
	runners, skipped, err := bench.PickRunners(c.Runners, harness.AllRunners(), ios.Err)
	if err != nil {
		return nil, err
	}
	env := fioEnv{exe: exe}
	if c.Client == load.ClientFio {
		if env.fio, err = load.FindFio(); err != nil {
			return nil, err
		}
	}
	if len(c.Peers) > 0 {
		if env.gnetSink = c.GnetSink; env.gnetSink == "" {
			if env.gnetSink, err = peers.BuildGnet(ctx, ios); err != nil {
				return nil, err
			}
		}
	}
	pin, unpin := bench.PinApart(c.Pin)
	defer unpin()
	env.cpus = pin.GenCPUs
	wire, wireWhy, closeWire, err := c.openWire(ctx, pin, ios)
	if err != nil {
		return nil, err
	}
	defer closeWire()
	env.wire = wire
	rep := &UDPRunReport{Command: "run", Proto: load.ProtoUDP, Host: harness.HostInfo(), Pinning: pin, Wire: wire.Info(c.Wire, wireWhy),
		Skipped: skipped, OK: true, Notes: []string{udpNote},
		Config: udpRunParams{Client: c.Client, Peers: c.Peers, Sources: c.Sources, DurationS: c.Duration.Seconds(), DatagramSize: int64(c.MsgSize),
			RatesDps: c.UDPRates, Arrivals: c.Arrivals, ReadBuffer: int64(c.UDPReadBuffer), MaxLoss: c.UDPMaxLoss, Rounds: c.Rounds,
			Pool: c.Engine.Pool, Buf: int64(c.Engine.Buf), Workers: c.Engine.Workers, FlushNs: int64(c.Engine.Flush), Inline: c.Engine.Inline}}
	rows := append(slices.Clone(runners), c.Peers...)
	rates := []float64(c.UDPRates)
	if len(rates) == 0 {
		rates = []float64{0}
	}
	sweep := len(rates) > 1
	fmt.Fprintf(ios.Err, "sluice-bench run: udp, %d %s of %s datagrams, offered %s, %v per row, rows %v, SO_RCVBUF %s; %s; %s\n",
		c.Sources, udpSendersName(c.Client), report.FormatBytes(uint64(c.MsgSize)), udpRatesNote(rates), c.Duration, rows, report.FormatBytes(uint64(c.UDPReadBuffer)),
		bench.PinNote(pin), bench.WireNote(rep.Wire))
	failed := map[string]bool{}
	sustained := map[string]*UDPSustained{}
	for _, name := range rows {
		sustained[name] = &UDPSustained{Runner: name}
	}
	for _, rate := range rates {
		byRow := map[string][]*UDPResult{}
		for round := range c.Rounds {
			order := slices.Clone(rows)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, name := range order {
				if failed[name] || sustained[name].FailedAt > 0 {
					continue
				}
				r, err := measureUDP(ctx, c, env, name, rate, round)
				if err != nil {
					if ctx.Err() != nil {
						return nil, fmt.Errorf("bench: %s: %w", name, err)
					}
					fmt.Fprintf(ios.Err, "sluice-bench: %s failed: %v\n", name, err)
					failed[name] = true
					rep.Failed = append(rep.Failed, bench.Skipped{Runner: name, Reason: err.Error()})
					continue
				}
				label := name
				if c.Rounds > 1 {
					label = fmt.Sprintf("%s (round %d/%d)", name, round+1, c.Rounds)
				}
				fmt.Fprintf(ios.Err, "%s at %s: %s of %s datagrams delivered (%.3f%%), %s socket drops, %.2f core-s per million (sink process %.2f), load core %.0f%% busy\n",
					label, udpRateName(rate), humanize.Comma(int64(r.Delivered)), humanize.Comma(int64(r.Offered)), 100*r.DeliveredFraction,
					dropsName(r.SocketDrops), r.CoreSPerM, r.SinkSPerM, 100*r.LoadCoreUtil)
				for _, m := range r.Mismatches {
					fmt.Fprintf(ios.Err, "MISMATCH %s: %s\n", name, m)
				}
				rep.Runs = append(rep.Runs, r)
				byRow[name] = append(byRow[name], r)
			}
		}
		for _, name := range rows {
			if len(byRow[name]) == 0 {
				continue
			}
			s := summarizeUDP(byRow[name])
			rep.Summary = append(rep.Summary, s)
			rep.OK = rep.OK && s.Verified
			if sweep {
				sustained[name].step(s, c.UDPMaxLoss)
			}
		}
	}
	if len(rep.Failed) == len(rows) {
		return nil, fmt.Errorf("bench: every row failed; the first: %s", rep.Failed[0].Reason)
	}
	if sweep {
		for _, name := range rows {
			if !failed[name] {
				rep.Sustained = append(rep.Sustained, *sustained[name])
			}
		}
	}
	if share, ok := harness.CPUShareSince(cpu); ok {
		if n := harness.BusyNote(share, rep.Host.CPUs); n != "" {
			rep.Notes = append(rep.Notes, n)
		}
	}
	fmt.Fprintln(ios.Out)
	writeUDPTable(ios.Out, rep)
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	if !rep.OK {
		fmt.Fprintln(ios.Err, "sluice-bench run: FAILED: a UDP row's counts do not add up (see MISMATCH lines)")
		return rep, ErrUDPAccounting
	}
	return rep, nil
}

// udpSendersName names a UDP load's senders.
func udpSendersName(client string) string {
	if client == load.ClientGen {
		return "generator sockets"
	}
	return "fio jobs"
}

func udpRateName(dps float64) string {
	if dps == 0 {
		return "flat out"
	}
	return humanize.Comma(int64(dps)) + "/s"
}

func udpRatesNote(rates []float64) string {
	s := make([]string, len(rates))
	for i, r := range rates {
		s[i] = udpRateName(r)
	}
	if len(rates) > 1 {
		return "a sweep over " + strings.Join(s, ", ")
	}
	return s[0]
}

func dropsName(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return humanize.Comma(n)
}

// measureUDP measures one row at one rate: the sink in its process on the
// sink's side, fio on the load's, the sink namespace's Udp counters read
// before and after.
func measureUDP(ctx context.Context, c RunConfig, env fioEnv, row string, rate float64, round int) (*UDPResult, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-udp-")
	if err != nil {
		return nil, fmt.Errorf("bench: udp: %w", err)
	}
	defer os.RemoveAll(dir)
	sinkJSON := filepath.Join(dir, "sink.json")
	size := strconv.Itoa(int(c.MsgSize))
	rbuf := strconv.FormatInt(int64(c.UDPReadBuffer), 10)
	var bin string
	var args []string
	if peers.IsRow(row) {
		bin = env.gnetSink
		args = append([]string{"-proto", "udp", "-listen", env.wire.ListenAddr(), "-until-idle", load.FioSinkIdle.String(), "-json", sinkJSON,
			"-datagram-size", size, "-read-buffer", rbuf}, peerArgs(bench.Workload{Runner: row})...)
	} else {
		bin = env.exe
		args = append([]string{"sink", "--proto", "udp", "--listen", env.wire.ListenAddr(), "--runner", row, "--until-idle", load.FioSinkIdle.String(),
			"--json", sinkJSON, "--datagram-size", size, "--udp-read-buffer", rbuf}, c.Engine.Args()...)
	}
	mib0, err := harness.ReadUDPMIB(ctx, env.wire)
	if err != nil {
		return nil, err
	}
	cores := harness.StartCoreSampler(env.wire.SinkCPUs, env.wire.LoadCPUs)
	defer cores.Finish()
	sp, err := startSinkProc(ctx, env.wire, bin, args)
	if err != nil {
		return nil, err
	}
	sent, loadCPU, err := runUDPLoad(ctx, c, env, sp.addr, rate, dir)
	if err != nil {
		sp.stop()
		return nil, err
	}
	if err := sp.wait(30 * time.Second); err != nil {
		return nil, err
	}
	samples := cores.Finish()
	mib1, err := harness.ReadUDPMIB(ctx, env.wire)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(sinkJSON)
	if err != nil {
		return nil, fmt.Errorf("bench: sink report: %w", err)
	}
	var sr sink.UDPSinkReport
	if err := json.Unmarshal(b, &sr); err != nil {
		return nil, fmt.Errorf("bench: sink report: %w", err)
	}
	r := udpResult(row, round, rate, int(c.MsgSize), &sr, sent, mib1.Sub(mib0), env.wire.Veth())
	r.LoadCPUS, r.Wire = loadCPU, env.wire.Name()
	if u, ok := harness.CoreOver(samples, sr.FirstNs, sr.LastNs); ok && r.Delivered > 0 {
		r.CoreCPUS, r.CoreSoftirqS = u.Sink, u.Soft
		r.CoreSPerM = u.Sink / (float64(r.Delivered) / 1e6)
		if u.Seconds > 0 {
			r.CoreUtil = min(u.Sink/(u.Seconds*float64(max(len(env.wire.SinkCPUs), 1))), 1)
			r.LoadCoreUtil = min(u.Load/(u.Seconds*float64(max(len(env.wire.LoadCPUs), 1))), 1)
		}
	}
	return r, nil
}

// runUDPLoad sends a row's load to addr from the load's side of the wire:
// fio, or the built-in generator with --client gen. It returns what the
// load says it sent and its CPU time.
func runUDPLoad(ctx context.Context, c RunConfig, env fioEnv, addr string, rate float64, dir string) (udpSent, float64, error) {
	lctx, cancel := context.WithTimeout(ctx, c.Duration+2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var cmd *exec.Cmd
	fioJSON := filepath.Join(dir, "fio.json")
	if c.Client == load.ClientGen {
		cmd = env.wire.Command(lctx, harness.SideLoad, env.exe, "udpgen", "--addr", addr, "--senders", strconv.Itoa(c.Sources),
			"--duration", c.Duration.String(), "--msg-size", strconv.Itoa(int(c.MsgSize)), "--rate", strconv.FormatFloat(rate, 'f', -1, 64))
		cmd.Stdout = &out
		cmd.Stderr = &out
	} else {
		jobFile := filepath.Join(dir, "job.fio")
		if err := os.WriteFile(jobFile, []byte(udpJob(addr, c, rate, env.cpus).File()), 0o644); err != nil {
			return udpSent{}, 0, fmt.Errorf("bench: fio: %w", err)
		}
		cmd = env.wire.Command(lctx, harness.SideLoad, env.fio, "--output-format=json", "--output="+fioJSON, jobFile)
		cmd.Stdout, cmd.Stderr = &out, &out
	}
	if err := harness.StartOnCPUs(cmd, env.cpus); err != nil {
		return udpSent{}, 0, fmt.Errorf("bench: start %s: %w", c.Client, err)
	}
	if err := cmd.Wait(); err != nil {
		return udpSent{}, 0, fmt.Errorf("bench: %s: %w\n%s", c.Client, err, out.Bytes())
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if c.Client == load.ClientGen {
		var g load.UDPGenReport
		if err := json.Unmarshal(out.Bytes(), &g); err != nil {
			return udpSent{}, 0, fmt.Errorf("bench: udpgen: bad report: %w\n%s", err, out.Bytes())
		}
		return genUDPSent(&g), cpu, nil
	}
	b, err := os.ReadFile(fioJSON)
	if err != nil {
		return udpSent{}, 0, fmt.Errorf("bench: fio: %w", err)
	}
	fr, err := load.ParseFioNet(b)
	if err != nil {
		return udpSent{}, 0, err
	}
	return fioUDPSent(fr), cpu, nil
}

// udpResult is a row's figures from the sink's report, fio's, and the
// growth of the sink namespace's Udp counters; veth says those counters
// are the sink's alone.
func udpResult(row string, round int, rate float64, size int, sr *sink.UDPSinkReport, sent udpSent, mib harness.UDPMIB, veth bool) *UDPResult {
	r := &UDPResult{Runner: row, Round: round, RateDps: rate, DatagramSize: size, Delivered: sr.Datagrams, Others: sr.Others,
		SocketDrops: sr.Drops, SNMP: mib, ReadBuffer: sr.ReadBuffer, ThreadsMax: sr.ThreadsMax, RSSMaxBytes: sr.RSSMaxBytes, BeforeUDP: -1}
	r.Offered = sent.Datagrams
	if r.Counters = sr.Counters; r.Counters != nil && r.Counters.Reads > 0 {
		r.DatagramsPerRead = float64(r.Delivered) / float64(r.Counters.Reads)
	}
	if sent.Seconds > 0 {
		r.OfferedDps = float64(r.Offered) / sent.Seconds
	}
	if r.Offered > 0 {
		r.DeliveredFraction = float64(r.Delivered) / float64(r.Offered)
	}
	r.Lost = r.Offered - min(r.Offered, r.Delivered)
	if r.Offered > 0 {
		r.LostFraction = float64(r.Lost) / float64(r.Offered)
	}
	if sr.LastNs > sr.FirstNs {
		r.DurationS = time.Duration(sr.LastNs - sr.FirstNs).Seconds()
		r.DeliveredDps = float64(r.Delivered) / r.DurationS
	}
	r.SinkCPUS = sr.CPUS
	if cpu, _, ok := harness.UsageOver(sink.UDPUsageSamples(sr.Usage), sr.FirstNs, sr.LastNs); ok {
		r.SinkCPUS = cpu.Seconds()
	}
	if r.Delivered > 0 {
		r.SinkSPerM = r.SinkCPUS / (float64(r.Delivered) / 1e6)
	}
	all := sent.Datagrams + sent.Control
	if veth {
		r.BeforeUDP = int64(all) - int64(mib.InDatagrams+mib.InErrors+mib.NoPorts)
	}
	r.Mismatches = udpMismatches(r, sr, sent, veth)
	r.Verified = len(r.Mismatches) == 0
	return r
}

// udpMismatches lists every way a row's counts do not add up: every
// datagram the load sent was delivered, or dropped by the kernel where a
// counter saw it.
func udpMismatches(r *UDPResult, sr *sink.UDPSinkReport, load udpSent, veth bool) []string {
	out := slices.Clone(load.Errors)
	sent := load.Datagrams + load.Control
	if sr.Errors > 0 {
		out = append(out, fmt.Sprintf("the sink reported %d errors: %s", sr.Errors, strings.Join(sr.ErrorSamples, "; ")))
	}
	got := r.Delivered + r.Others
	if r.Delivered > r.Offered || got > sent {
		out = append(out, fmt.Sprintf("the sink received %d datagrams of %d bytes and %d others, the load sent %d and %d small messages",
			r.Delivered, r.DatagramSize, r.Others, r.Offered, load.Control))
	}
	if r.SocketDrops >= 0 && got+uint64(r.SocketDrops) > sent {
		out = append(out, fmt.Sprintf("%d received and %d dropped by the socket, more than the %d the load sent", got, r.SocketDrops, sent))
	}
	if !veth {
		return out
	}
	// Alone in its namespace, the sink's socket is every Udp counter's,
	// and every datagram UDP refused it (a full receive buffer, the
	// RcvbufErrors; a failed memory charge) is in InErrors.
	if r.SocketDrops >= 0 && uint64(r.SocketDrops) != r.SNMP.InErrors {
		out = append(out, fmt.Sprintf("the socket counted %d drops, the namespace's Udp InErrors %d", r.SocketDrops, r.SNMP.InErrors))
	}
	if r.SNMP.InDatagrams != got {
		out = append(out, fmt.Sprintf("the sink received %d datagrams, the namespace's Udp InDatagrams %d", got, r.SNMP.InDatagrams))
	}
	if r.BeforeUDP < 0 {
		out = append(out, fmt.Sprintf("the namespace's Udp counters saw %d more datagrams than the load sent", -r.BeforeUDP))
	}
	return out
}

// summarizeUDP is one row at one rate over its rounds.
func summarizeUDP(rs []*UDPResult) UDPSummary {
	col := func(f func(*UDPResult) float64) []float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return xs
	}
	s := UDPSummary{Runner: rs[0].Runner, RateDps: rs[0].RateDps, Rounds: len(rs), Verified: true,
		OfferedDps:   bench.Spread("offered_dps", col(func(r *UDPResult) float64 { return r.OfferedDps })),
		DeliveredDps: bench.Spread("delivered_dps", col(func(r *UDPResult) float64 { return r.DeliveredDps })),
		Delivered:    bench.Spread("delivered_fraction", col(func(r *UDPResult) float64 { return r.DeliveredFraction })),
		Lost:         bench.Spread("lost_fraction", col(func(r *UDPResult) float64 { return r.LostFraction })),
		SocketDrops:  bench.Spread("socket_drops", col(func(r *UDPResult) float64 { return float64(r.SocketDrops) })),
		RcvbufErrors: bench.Spread("rcvbuf_errors", col(func(r *UDPResult) float64 { return float64(r.SNMP.RcvbufErrors) })),
		SinkSPerM:    bench.Spread("sink_cpu_s_per_million", col(func(r *UDPResult) float64 { return r.SinkSPerM })),
		CoreSPerM:    bench.Spread("core_cpu_s_per_million", col(func(r *UDPResult) float64 { return r.CoreSPerM })),
		CoreUtil:     bench.Spread("core_util", col(func(r *UDPResult) float64 { return r.CoreUtil })),
		LoadCoreUtil: bench.Spread("load_core_util", col(func(r *UDPResult) float64 { return r.LoadCoreUtil })),
		PerRead:      bench.Spread("datagrams_per_read", col(func(r *UDPResult) float64 { return r.DatagramsPerRead })),
	}
	for _, r := range rs {
		s.Verified = s.Verified && r.Verified
	}
	return s
}

// writeUDPTable prints the summary: a line per row and rate, medians with
// the rounds' min-max.
func writeUDPTable(w io.Writer, rep *UDPRunReport) {
	fmt.Fprintf(w, "udp, %d-byte datagrams from %d %s, %d round(s), SO_RCVBUF %s; %s\n",
		rep.Config.DatagramSize, rep.Config.Sources, udpSendersName(rep.Config.Client), rep.Config.Rounds, report.FormatBytes(uint64(rep.Config.ReadBuffer)), bench.WireNote(rep.Wire))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\trate\toffered/s\tdelivered/s\tdelivered\tsocket drops\tRcvbufErrors\tcore s/M\tsink s/M\tcore busy\tload core\tper read\tok\t")
	for _, s := range rep.Summary {
		ok := "yes"
		if !s.Verified {
			ok = "NO"
		}
		perRead := "-" // a reference sink's reads are its own
		if s.PerRead.Max > 0 {
			perRead = numSpread(s.PerRead)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Runner, udpRateName(s.RateDps),
			countSpread(s.OfferedDps), countSpread(s.DeliveredDps), pctSpread(s.Delivered), countSpread(s.SocketDrops),
			countSpread(s.RcvbufErrors), numSpread(s.CoreSPerM), numSpread(s.SinkSPerM), pctSpread(s.CoreUtil), pctSpread(s.LoadCoreUtil), perRead, ok)
	}
	tw.Flush()
	if len(rep.Sustained) > 0 {
		fmt.Fprintf(w, "\nsustained with at most %.2f%% lost (median over the rounds):\n", 100*rep.Config.MaxLoss)
		for _, s := range rep.Sustained {
			rate := udpRateName(s.RateDps)
			if s.LoadBound {
				rate = fmt.Sprintf("%s asked, but the load offered only %s", rate, udpRateName(s.OfferedDps))
			}
			switch {
			case s.RateDps == 0:
				fmt.Fprintf(w, "  %s: none of the rates (lost more at %s)\n", s.Runner, udpRateName(s.FailedAt))
			case s.FailedAt > 0:
				fmt.Fprintf(w, "  %s: %s (lost more at %s)\n", s.Runner, rate, udpRateName(s.FailedAt))
			default:
				fmt.Fprintf(w, "  %s: %s, the highest rate tried\n", s.Runner, rate)
			}
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// The table's cells: the median, and the min-max when the rounds differ.
func countSpread(s bench.RatioSpread) string {
	f := func(x float64) string { return humanize.Comma(int64(x)) }
	if s.Min == s.Max {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", f(s.Median), f(s.Min), f(s.Max))
}

func pctSpread(s bench.RatioSpread) string {
	if s.Min == s.Max {
		return fmt.Sprintf("%.2f%%", 100*s.Median)
	}
	return fmt.Sprintf("%.2f%% (%.2f-%.2f)", 100*s.Median, 100*s.Min, 100*s.Max)
}

func numSpread(s bench.RatioSpread) string {
	if s.Min == s.Max {
		return fmt.Sprintf("%.2f", s.Median)
	}
	return fmt.Sprintf("%.2f (%.2f-%.2f)", s.Median, s.Min, s.Max)
}
