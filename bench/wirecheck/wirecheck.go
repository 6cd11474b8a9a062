package wirecheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
)

// WireCheckConfig configures the `wire-check` command: one round of the
// built-in generator into one runner over the veth wire, with the
// kernel's per-CPU receive counters read around it.
type WireCheckConfig struct {
	Runner   string
	Sources  int
	Duration time.Duration
	MsgSize  report.Size
	JSON     string
	Exe      string // binary that runs `measure-child` and `gen`; default os.Executable
}

// DefaultWireCheckConfig returns the defaults documented on the flags.
func DefaultWireCheckConfig() WireCheckConfig {
	return WireCheckConfig{Runner: engine.RunnerAuto, Sources: 16, Duration: 2 * time.Second, MsgSize: load.DefaultRunMsgSize}
}

// RegisterFlags defines c's flags on fs, with c's values as defaults.
func (c *WireCheckConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Runner, "runner", c.Runner, "the sink's runner: auto, uring, epoll, goroutine or thread")
	fs.IntVar(&c.Sources, "sources", c.Sources, "concurrent TCP sources")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long the generator sends")
	fs.Var(&c.MsgSize, "msg-size", "message size (default 16KiB)")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
}

// Validate checks c, naming the flag at fault.
func (c WireCheckConfig) Validate() error {
	if c.Runner != engine.RunnerAuto && !slices.Contains(harness.AllRunners(), c.Runner) {
		return fmt.Errorf("--runner: %q: must be auto or among %s", c.Runner, strings.Join(harness.AllRunners(), ", "))
	}
	if c.Sources < 1 {
		return fmt.Errorf("--sources: %d: must be at least 1", c.Sources)
	}
	if c.Duration <= 0 {
		return fmt.Errorf("--duration: %v: must be positive", c.Duration)
	}
	if c.MsgSize < 16 {
		return fmt.Errorf("--msg-size: %d: must hold the 16-byte header", c.MsgSize)
	}
	return nil
}

// CPURx is what one CPU did for the network over a wire-check round.
type CPURx struct {
	CPU int `json:"cpu"`
	// NetRx is the NET_RX softirqs it ran (/proc/softirqs).
	NetRx uint64 `json:"net_rx_softirqs"`
	// Backlog is the packets it took from its backlog queue, where RPS
	// and veth put every packet it receives (/proc/net/softnet_stat's
	// first column), and RPSIPIs the times another CPU woke it to do so
	// (its tenth).
	Backlog uint64  `json:"backlog_packets"`
	RPSIPIs uint64  `json:"rps_ipis"`
	BusyS   float64 `json:"busy_s"`
	SoftS   float64 `json:"softirq_s"`
}

// WireCheckReport is the JSON report of `wire-check`.
type WireCheckReport struct {
	Command string           `json:"command"` // "wire-check"
	Wire    harness.WireInfo `json:"wire"`
	Result  *bench.Result    `json:"result"`
	// SinkRxPackets are the packets the sink's veth end received (the
	// load's data), LoadRxPackets the load's end (the sink's ACKs and
	// window updates).
	SinkRxPackets uint64  `json:"sink_rx_packets"`
	LoadRxPackets uint64  `json:"load_rx_packets"`
	CPUs          []CPURx `json:"cpus"`
	// OK says each side's CPU took at least its own end's packets from
	// its backlog: the sink's on the sink's CPU, the load's on the load's.
	OK     bool     `json:"ok"`
	Checks []string `json:"checks"`
}

// ErrWireCheck reports that the receive work did not land where the wire
// steers it.
var ErrWireCheck = errors.New("bench: wire-check: receive work is not on each side's own CPU")

// WireCheck runs the `wire-check` command: it builds the veth wire, runs
// one round through it, and shows on which CPU each side's packets were
// received.
func WireCheck(ctx context.Context, c WireCheckConfig, ios harness.IO) (*WireCheckReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	exe, err := bench.Executable(c.Exe)
	if err != nil {
		return nil, err
	}
	pin, unpin := bench.PinApart(true)
	defer unpin()
	if !pin.Enabled {
		return nil, fmt.Errorf("%w: %s", harness.ErrWireUnavailable, pin.Note)
	}
	wire, _, closeWire, err := harness.OpenWire(ctx, harness.WireVeth, pin.EngineCPUs, pin.GenCPUs, ios.Err)
	if err != nil {
		return nil, err
	}
	defer closeWire()
	rep := &WireCheckReport{Command: "wire-check", Wire: wire.Info(harness.WireVeth, "")}
	fmt.Fprintf(ios.Err, "sluice-bench wire-check: %s\n", bench.WireNote(rep.Wire))

	before, err := readRxCounters(ctx, wire)
	if err != nil {
		return nil, err
	}
	w := bench.Workload{Runner: c.Runner, Sources: c.Sources, Duration: c.Duration, MsgSize: c.MsgSize, Arrivals: load.ArrivalsPoisson,
		MaxDial: load.DefaultMaxDial, Verify: true, Exe: exe, GenCPUs: pin.GenCPUs, Label: c.Runner, Wire: wire}
	r, err := bench.MeasureChild(ctx, w, ios)
	if err != nil {
		return nil, err
	}
	after, err := readRxCounters(ctx, wire)
	if err != nil {
		return nil, err
	}
	rep.Result = r
	rep.SinkRxPackets = after.sinkRx - before.sinkRx
	rep.LoadRxPackets = after.loadRx - before.loadRx
	for _, cpu := range append(append([]int(nil), wire.SinkCPUs...), wire.LoadCPUs...) {
		a, b := before.cpus[cpu], after.cpus[cpu]
		rep.CPUs = append(rep.CPUs, CPURx{CPU: cpu, NetRx: b.netRx - a.netRx, Backlog: b.backlog - a.backlog, RPSIPIs: b.rpsIPIs - a.rpsIPIs,
			BusyS: float64(b.busy-a.busy) / harness.ClockTicks, SoftS: float64(b.soft-a.soft) / harness.ClockTicks})
	}
	rep.OK = true
	check := func(side string, cpus []int, packets uint64, what string) {
		var got uint64
		for _, c := range cpus {
			got += after.cpus[c].backlog - before.cpus[c].backlog
		}
		ok := packets > 0 && got >= packets
		verdict := "ok"
		if !ok {
			verdict = "FAILED"
			rep.OK = false
		}
		rep.Checks = append(rep.Checks, fmt.Sprintf("%s: the %s end received %s packets (%s); CPUs %v took %s from their backlog: %s",
			side, side, humanize.Comma(int64(packets)), what, cpus, humanize.Comma(int64(got)), verdict))
	}
	check(harness.SideSink, wire.SinkCPUs, rep.SinkRxPackets, "the load's data")
	check(harness.SideLoad, wire.LoadCPUs, rep.LoadRxPackets, "the sink's ACKs")
	writeWireCheck(ios.Out, rep)
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	if !rep.OK {
		return rep, ErrWireCheck
	}
	return rep, nil
}

func writeWireCheck(w io.Writer, rep *WireCheckReport) {
	r := rep.Result
	fmt.Fprintf(w, "\n%s over the veth wire: %s in %.2fs, %s; verified %v\n", r.Runner, report.FormatBytes(r.Bytes), r.DurationS, report.FormatRate(r.ThroughputBps), r.Verified)
	fmt.Fprintf(w, "packets received by the sink's end %s (the load's data), by the load's end %s (the sink's ACKs)\n\n",
		humanize.Comma(int64(rep.SinkRxPackets)), humanize.Comma(int64(rep.LoadRxPackets)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CPU\tside\tNET_RX softirqs\tbacklog packets\tRPS IPIs\tbusy s\tsoftirq s\t")
	for _, c := range rep.CPUs {
		side := harness.SideLoad
		for _, s := range rep.Wire.SinkCPUs {
			if s == c.CPU {
				side = harness.SideSink
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t\n", c.CPU, side, humanize.Comma(int64(c.NetRx)), humanize.Comma(int64(c.Backlog)),
			humanize.Comma(int64(c.RPSIPIs)), c.BusyS, c.SoftS)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, c := range rep.Checks {
		fmt.Fprintln(w, c)
	}
	fmt.Fprintln(w, "note: the CPU counters are the whole machine's: other traffic on it (a neighbour's loopback) adds to them, never takes away")
}

// rxCounters are the counters wire-check reads before and after a round.
type rxCounters struct {
	sinkRx, loadRx uint64
	cpus           map[int]cpuRx
}

type cpuRx struct {
	netRx, backlog, rpsIPIs uint64
	busy, soft              uint64
}

func readRxCounters(ctx context.Context, wire harness.WireEnv) (rxCounters, error) {
	var rc rxCounters
	var err error
	if rc.sinkRx, err = vethRxPackets(ctx, wire, harness.SideSink); err != nil {
		return rc, err
	}
	if rc.loadRx, err = vethRxPackets(ctx, wire, harness.SideLoad); err != nil {
		return rc, err
	}
	b, err := os.ReadFile("/proc/softirqs")
	if err != nil {
		return rc, fmt.Errorf("bench: wire-check: %w", err)
	}
	netRx, err := parseSoftirqs(b, "NET_RX")
	if err != nil {
		return rc, err
	}
	if b, err = os.ReadFile("/proc/net/softnet_stat"); err != nil {
		return rc, fmt.Errorf("bench: wire-check: %w", err)
	}
	backlog, ipis, err := parseSoftnetStat(b)
	if err != nil {
		return rc, err
	}
	if b, err = os.ReadFile("/proc/stat"); err != nil {
		return rc, fmt.Errorf("bench: wire-check: %w", err)
	}
	st, err := harness.ParseProcStat(b)
	if err != nil {
		return rc, err
	}
	rc.cpus = map[int]cpuRx{}
	for cpu := range st {
		rc.cpus[cpu] = cpuRx{netRx: netRx[cpu], backlog: backlog[cpu], rpsIPIs: ipis[cpu], busy: st[cpu].Busy(), soft: st[cpu].SoftIRQ}
	}
	return rc, nil
}

// vethRxPackets reads the packets side's veth end has received, from
// inside its namespace.
func vethRxPackets(ctx context.Context, wire harness.WireEnv, side string) (uint64, error) {
	ns := wire.SinkNS
	if side == harness.SideLoad {
		ns = wire.LoadNS
	}
	out, err := exec.CommandContext(ctx, wire.IP, "-j", "-s", "-n", ns, "link", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("bench: wire-check: ip -n %s link show: %w", ns, err)
	}
	var links []struct {
		Name  string `json:"ifname"`
		Stats struct {
			Rx struct {
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return 0, fmt.Errorf("bench: wire-check: ip -j link show: %w", err)
	}
	for _, l := range links {
		if l.Name != "lo" {
			return l.Stats.Rx.Packets, nil
		}
	}
	return 0, fmt.Errorf("bench: wire-check: no veth in %s", ns)
}

// parseSoftirqs reads one row of /proc/softirqs (such as NET_RX): the
// count per CPU, by the CPU numbers of its header.
func parseSoftirqs(b []byte, name string) (map[int]uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	var cpus []int
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if cpus == nil {
			for _, h := range f {
				n, err := strconv.Atoi(strings.TrimPrefix(h, "CPU"))
				if err != nil {
					return nil, fmt.Errorf("bench: /proc/softirqs: header %q", sc.Text())
				}
				cpus = append(cpus, n)
			}
			continue
		}
		if f[0] != name+":" {
			continue
		}
		out := map[int]uint64{}
		for i, v := range f[1:] {
			if i >= len(cpus) {
				break
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bench: /proc/softirqs: %s: %w", name, err)
			}
			out[cpus[i]] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("bench: /proc/softirqs: no %s row", name)
}

// parseSoftnetStat reads /proc/net/softnet_stat: per CPU, in hexadecimal,
// the packets processed from its backlog (the first column) and the RPS
// wake-ups it received (the tenth). Kernels since 5.10 give the CPU's
// number in the thirteenth column; before, a line per online CPU in order.
func parseSoftnetStat(b []byte) (processed, rpsIPIs map[int]uint64, err error) {
	processed, rpsIPIs = map[int]uint64{}, map[int]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for i := 0; sc.Scan(); i++ {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			return nil, nil, fmt.Errorf("bench: softnet_stat: line %d: %d columns", i+1, len(f))
		}
		hex := func(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }
		cpu := i
		if len(f) >= 13 {
			n, err := hex(f[12])
			if err != nil {
				return nil, nil, fmt.Errorf("bench: softnet_stat: %w", err)
			}
			cpu = int(n)
		}
		p, err1 := hex(f[0])
		r, err2 := hex(f[9])
		if err := errors.Join(err1, err2); err != nil {
			return nil, nil, fmt.Errorf("bench: softnet_stat: %w", err)
		}
		processed[cpu], rpsIPIs[cpu] = p, r
	}
	return processed, rpsIPIs, nil
}
