package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
)

// Wires: how a measurement's load reaches its sink.
//
// On loopback the sender's packets are received on the sender's CPU, and
// when the sink opens a window the sender's transmit runs on the sink's
// CPU, so a sink that lets its queues fill is handed the sender's work.
// On the veth wire the sink and the load each live in a network namespace
// of their own, joined by a veth pair whose receive queues steer packets
// (RPS) to their own side's CPU: each side receives and transmits its own
// packets, as two hosts do.
const (
	// WireAuto is WireVeth when it can be built here, else WireLoopback
	// with the reason printed once.
	WireAuto = "auto"
	// WireVeth is the two-namespace topology (see Wire).
	WireVeth = "veth"
	// WireLoopback is 127.0.0.1 in this network namespace.
	WireLoopback = "loopback"
)

// The veth wire's addresses: link-local, and only ever inside the two
// namespaces the bench creates, so they can collide with nothing.
const (
	WireSinkIP = "169.254.77.1"
	WireLoadIP = "169.254.77.2"
	wirePrefix = 30
)

// ErrWireUnavailable is wrapped by the reason a veth wire cannot be built
// here: not root, no ip command, no network namespaces, fewer than two
// CPUs.
var ErrWireUnavailable = errors.New("bench: wire: veth topology unavailable")

// ValidWire checks a --wire value.
func ValidWire(mode string) error {
	switch mode {
	case WireAuto, WireVeth, WireLoopback:
		return nil
	}
	return fmt.Errorf("--wire: %q: must be auto, veth or loopback", mode)
}

// WireInfo is the report's record of the wire a run used.
type WireInfo struct {
	// Mode is WireVeth or WireLoopback.
	Mode string `json:"mode"`
	// Asked is the --wire value.
	Asked string `json:"asked"`
	// Reason says why a run asked for auto got loopback.
	Reason   string `json:"reason,omitempty"`
	SinkNS   string `json:"sink_netns,omitempty"`
	LoadNS   string `json:"load_netns,omitempty"`
	SinkAddr string `json:"sink_addr"`
	LoadAddr string `json:"load_addr,omitempty"`
	SinkCPUs []int  `json:"sink_cpus,omitempty"`
	LoadCPUs []int  `json:"load_cpus,omitempty"`
	// SinkRPS and LoadRPS are the rps_cpus masks of each side's veth
	// receive queue.
	SinkRPS string `json:"sink_rps_cpus,omitempty"`
	LoadRPS string `json:"load_rps_cpus,omitempty"`
	// Congestion is the TCP congestion control both sides use.
	Congestion string `json:"congestion,omitempty"`
}

// WireEnv is what a measurement needs to know of the wire: where the sink
// listens, and how to start a process on either side. Its zero value is
// loopback with no accounting of cores, which every command but run uses.
type WireEnv struct {
	Mode     string `json:",omitempty"` // "" or WireLoopback, or WireVeth
	IP       string `json:",omitempty"` // the ip command, for WireVeth
	SinkNS   string `json:",omitempty"`
	LoadNS   string `json:",omitempty"`
	SinkCPUs []int  `json:",omitempty"` // the receiving core(s), for accounting
	LoadCPUs []int  `json:",omitempty"`
	// Congestion is the TCP congestion control of both namespaces.
	Congestion string `json:",omitempty"`
}

// Veth reports whether e is the veth wire.
func (e WireEnv) Veth() bool { return e.Mode == WireVeth }

// Name is the wire's label in reports.
func (e WireEnv) Name() string {
	if e.Veth() {
		return WireVeth
	}
	return WireLoopback
}

// sinkHost is the address sinks listen on.
func (e WireEnv) sinkHost() string {
	if e.Veth() {
		return WireSinkIP
	}
	return "127.0.0.1"
}

// ListenAddr is a sink's listen address with a port the kernel picks.
func (e WireEnv) ListenAddr() string { return e.sinkHost() + ":0" }

// Sides of the wire, for WireEnv.command.
const (
	SideSink = "sink"
	SideLoad = "load"
)

// Command returns a command that runs bin on side's end of the wire: in
// its namespace, through `ip netns exec`, which switches namespace and
// then execs bin itself (so the process, its PID and its signals are
// bin's). On loopback it is bin as it is.
func (e WireEnv) Command(ctx context.Context, side, bin string, args ...string) *exec.Cmd {
	if !e.Veth() {
		return exec.CommandContext(ctx, bin, args...)
	}
	ns := e.SinkNS
	if side == SideLoad {
		ns = e.LoadNS
	}
	return exec.CommandContext(ctx, e.IP, append([]string{"netns", "exec", ns, bin}, args...)...)
}

// Info is the report's record of e.
func (e WireEnv) Info(asked, reason string) WireInfo {
	wi := WireInfo{Mode: e.Name(), Asked: asked, Reason: reason, SinkAddr: e.sinkHost(), SinkCPUs: e.SinkCPUs, LoadCPUs: e.LoadCPUs}
	if e.Veth() {
		wi.SinkNS, wi.LoadNS, wi.LoadAddr = e.SinkNS, e.LoadNS, WireLoadIP
		wi.SinkRPS, wi.LoadRPS = CPUMask(e.SinkCPUs), CPUMask(e.LoadCPUs)
		wi.Congestion = e.Congestion
	}
	return wi
}

// CPUMask is the hexadecimal CPU mask of cpus, as rps_cpus takes it:
// 32-bit words, the most significant first, separated by commas.
func CPUMask(cpus []int) string {
	var words []uint32
	for _, c := range cpus {
		for len(words) <= c/32 {
			words = append(words, 0)
		}
		words[c/32] |= 1 << (c % 32)
	}
	if len(words) == 0 {
		return "0"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%x", words[len(words)-1])
	for i := len(words) - 2; i >= 0; i-- {
		fmt.Fprintf(&b, ",%08x", words[i])
	}
	return b.String()
}

// WireTopo is a veth wire the bench built: two network namespaces joined
// by a veth pair. Close removes it; it is safe to call more than once and
// from any goroutine.
type WireTopo struct {
	IP             string
	SinkNS, LoadNS string
	SinkIf, LoadIf string
	spec           WireSpec
	Congestion     string // the namespaces' TCP congestion control
	once           sync.Once
	closeErr       error
}

// WireSpec is what BuildWire builds.
type WireSpec struct {
	SinkCPUs, LoadCPUs []int
	// Fail, when set, is called after each step of the build with the
	// step's name, and an error it returns fails the build there: the
	// tests' way to check that a failed build leaves nothing behind.
	Fail func(step string) error
}

// Env is the wire as measurements see it.
func (t *WireTopo) Env() WireEnv {
	return WireEnv{Mode: WireVeth, IP: t.IP, SinkNS: t.SinkNS, LoadNS: t.LoadNS, SinkCPUs: t.spec.SinkCPUs, LoadCPUs: t.spec.LoadCPUs, Congestion: t.Congestion}
}

// OpenWire sets up the wire a run asked for (mode is WireAuto, WireVeth or
// WireLoopback) between sinkCPUs and loadCPUs, and returns it with its
// teardown and, when auto fell back to loopback, why (printed once on
// errOut). WireVeth that cannot be built is an error.
func OpenWire(ctx context.Context, mode string, sinkCPUs, loadCPUs []int, errOut io.Writer) (WireEnv, string, func(), error) {
	lo := WireEnv{Mode: WireLoopback, SinkCPUs: sinkCPUs, LoadCPUs: loadCPUs}
	if mode == WireLoopback {
		return lo, "", func() {}, nil
	}
	t, err := BuildWire(ctx, WireSpec{SinkCPUs: sinkCPUs, LoadCPUs: loadCPUs})
	if err != nil {
		if mode == WireVeth || ctx.Err() != nil {
			return WireEnv{}, "", nil, err
		}
		reason := strings.TrimPrefix(err.Error(), ErrWireUnavailable.Error()+": ")
		fmt.Fprintf(errOut, "sluice-bench: wire: loopback, since the veth wire cannot be built here: %s\n", reason)
		return lo, reason, func() {}, nil
	}
	return t.Env(), "", func() { t.Close() }, nil
}
