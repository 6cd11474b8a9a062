package idle

// `sluice-bench idle` measures what idle connections cost a sink, per
// runner, beside a few active ones. Four kinds of process
// take part, so that each one's resources are its own:
//
//   - the parent (Idle) runs the scenario, reads the kernel's socket and
//     slab figures, and prints the report;
//   - the sink (the hidden `idle sink` child, idle_child.go) runs the
//     engine with one runner, on the parent's engine CPUs, and answers
//     the parent's requests for its counters, its memory and its streams;
//   - the idle clients (`idle conns`, idle_linux.go), one or more, open
//     the idle connections with raw non-blocking sockets, so that they
//     cost the clients no Go objects and no epoll registration, and end
//     them with a reset, so that no TIME_WAIT outlives the run;
//   - the generator (`gen`, as `run` starts it) sends the active load,
//     and the sink checksums every active stream to reconcile it.
//
// Per runner, the parent: samples the sink with no connection at all;
// runs the active load alone (the "without" phase); opens a burst of
// --burst idle connections as fast as the clients can and times how long
// the sink takes to register them; opens more, in steps of a burst, up
// to each --idle level, and samples the sink and the kernel there; runs
// the active load again beside the idle connections (the "with" phase);
// resets the idle connections, and stops the sink. The figures per idle
// connection are the differences between the first and the last level
// divided by the connections added between them.
//
// 100,000 connections on one host need more than one address pair: a
// (source address, listener) pair can hold about 28,000 connections
// (/proc/sys/net/ipv4/ip_local_port_range), so the idle listeners bind
// 127.0.0.11 and up (--listeners), the clients bind source addresses
// from 127.0.0.101 up, and no pair carries more than idlePerPair
// connections.
//
// They need more descriptors than one process may hold, too, where the
// hard RLIMIT_NOFILE is lower than that and may not be raised (no
// CAP_SYS_RESOURCE). The parent raises its own limits as far as it may
// (the hard one too as root) and plans within the hard limit its
// children inherit, H (idle_plan.go):
//
//   - the idle connections are spread over as many client processes as
//     it takes for none to hold more than H less a margin of 512
//     (--client-conns: fewer). Client i of n holds the plan's
//     connections i, i+n, i+2n..., so that at every level the clients
//     together hold its first connections, spread over the address
//     pairs as one client would spread them;
//   - a uring sink keeps each worker's connections in a registered file
//     table of --file-slots slots (default: its soft limit, at most
//     65,536), which do not count against RLIMIT_NOFILE: it raises its
//     soft limit to H and needs a descriptor only for the margin and the
//     connections beyond workers x slots. The other runners need one per
//     connection, idle or active, and the margin;
//   - a runner whose sink cannot hold a level stops the command before
//     anything starts, with an error that names the levels it could
//     measure, the uring workers that would hold them all, and the hard
//     limit that would. With the default levels (no --idle) a runner is
//     capped instead: it is measured at the levels it can hold and then
//     at the most it can, in thousands, and the report says so; one that
//     cannot hold the first level is skipped.
//
// Every process raises its soft limit as far as it needs (the uring sink
// to H), and the report says to what, with the descriptors the sink held
// at each level.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
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

// Defaults of `idle`: 1,000 active sources at
// 64 KiB/s beside 10,000 and then 100,000 idle connections.
const (
	DefaultIdleActive    = 1000
	DefaultIdleRate      = 64 << 10
	DefaultIdleMsgSize   = 1 << 10
	DefaultIdleDuration  = 10 * time.Second
	DefaultIdleBurst     = 10000
	DefaultIdleListeners = 4
	DefaultIdleSettle    = 2 * time.Second
)

// defaultIdleLevels are the idle levels `idle` measures by default.
var defaultIdleLevels = []int{10000, 100000}

// Address plan of the idle connections.
const (
	// idlePerPair caps the connections of one (source address, listener)
	// pair: well within the 28,232 ports of the default ephemeral range,
	// so that connect never searches a nearly full range.
	idlePerPair = 16000
	// idleMinSourceAddrs is the fewest source addresses the clients bind.
	idleMinSourceAddrs = 4
	// idleFirstListenHost and idleFirstSourceHost are the last octets of
	// the first idle listener's address and the first source address.
	idleFirstListenHost = 11
	idleFirstSourceHost = 101
	idleLastHost        = 254
	// idleActiveAddr is where the active load connects.
	idleActiveAddr = "127.0.0.1:0"
	// idleFDMargin is the descriptors each process needs besides one per
	// connection: listeners, the runner's rings or epoll sets, pipes, a
	// duplicate per connection being handed to a runner.
	idleFDMargin = 512
)

// idleStepTimeout bounds the wait for one step of connections to reach
// the sink; idleCloseTimeout the wait for the sink to end them all.
const (
	idleStepTimeout  = 120 * time.Second
	idleCloseTimeout = 120 * time.Second
	idlePoll         = 20 * time.Millisecond
	idleQuietLine    = 5 * time.Second // longest silence before a progress line
	// idleStall is how long the sink's idle count may stand still while
	// connections are being opened before the parent asks whether it
	// has run out of descriptors.
	idleStall = time.Second
)

// CountList is a comma-separated list of counts: "10000,100000" or
// "10k,100k". It implements flag.Value.
type CountList []int

func (l *CountList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// Set implements flag.Value.
func (l *CountList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := 1
		if t, ok := strings.CutSuffix(strings.ToLower(f), "k"); ok {
			f, mult = t, 1000
		}
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n < 0 || n > math.MaxInt32/mult {
			return fmt.Errorf("bad count %q (want e.g. 10000 or 10k)", f)
		}
		*l = append(*l, n*mult)
	}
	return nil
}

// idleLevelsFlag is --idle: it sets the levels and clears CapLevels.
type idleLevelsFlag struct{ c *IdleConfig }

func (f idleLevelsFlag) String() string {
	if f.c == nil {
		return ""
	}
	return f.c.Idle.String()
}

func (f idleLevelsFlag) Set(v string) error {
	f.c.CapLevels = false
	return f.c.Idle.Set(v)
}

// IdleConfig configures the `idle` command.
type IdleConfig struct {
	Runners report.StringList // empty: uring, epoll and goroutine, those available
	// Idle lists the idle levels, ascending; the figures per connection
	// are taken between the first and the last.
	Idle CountList
	// CapLevels measures a runner whose sink cannot hold the top level
	// (for want of descriptors) at the levels it can hold and then at
	// the most it can, instead of stopping before the start. It is set
	// by default and cleared by --idle: levels asked for are measured or
	// refused.
	CapLevels bool
	// Active sources send Rate each (MsgSize messages) for Duration,
	// once without the idle connections and once beside them. 0: no
	// active phases.
	Active   int
	Rate     report.Rate
	MsgSize  report.Size
	Duration time.Duration
	// Burst is how many idle connections are opened at once to time the
	// sink's accept; 0: DefaultIdleBurst, or the first level if lower.
	// Past the burst the connections are opened in steps of that size.
	Burst int
	// Listeners is the number of idle listeners (127.0.0.11 and up);
	// SourceAddrs the number of source addresses the clients bind
	// (127.0.0.101 and up), 0 to need no more than idlePerPair
	// connections per pair (and at least idleMinSourceAddrs).
	Listeners   int
	SourceAddrs int
	// ClientConns is the most idle connections one client process
	// holds; 0: what the hard RLIMIT_NOFILE allows, less idleFDMargin.
	ClientConns int
	// Settle is how long the sink is left alone at each level before it
	// is sampled.
	Settle time.Duration
	Engine harness.EngineFlags
	Pin    bool
	JSON   string // report file, "-" for stdout
	// HeapProfile is a directory for the sink's heap profile at each
	// level (heap-RUNNER-IDLE.pprof), "" for none; MemProfileRate is
	// the sink's runtime.MemProfileRate (0: Go's default, 512 KiB; 1
	// records every allocation, for exact byte counts, at a CPU cost).
	HeapProfile    string
	MemProfileRate int
	Exe            string // the sluice-bench binary; default os.Executable
}

// DefaultIdleConfig returns the defaults documented on the flags.
func DefaultIdleConfig() IdleConfig {
	return IdleConfig{Idle: slices.Clone(defaultIdleLevels), CapLevels: true, Active: DefaultIdleActive, Rate: DefaultIdleRate,
		MsgSize: DefaultIdleMsgSize, Duration: DefaultIdleDuration, Listeners: DefaultIdleListeners,
		Settle: DefaultIdleSettle, Pin: true}
}

// defaultIdleRunners are the runners `idle` measures by default. The
// thread runner is left out: a thread per idle connection stops at its
// cap of 8,000 threads.
func defaultIdleRunners() []string {
	return []string{"uring", "epoll", "goroutine"}
}

// RegisterFlags defines c's flags on fs, with c's values as defaults.
func (c *IdleConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Runners, "runners", "comma-separated runners to measure, in order (default: uring,epoll,goroutine, those available; thread stops at its thread cap)")
	fs.Var(idleLevelsFlag{c}, "idle", "idle levels, ascending, e.g. 10000,100000 or 10k,100k; the figures per idle connection are taken between the first and the last. "+
		"A runner whose sink cannot hold a level given here for want of descriptors (the hard RLIMIT_NOFILE) stops the command before it starts, naming what would fit; "+
		"with the default levels such a runner is measured up to the most it can hold instead, and one that cannot hold the first is skipped")
	fs.IntVar(&c.Active, "active", c.Active, "active sources, measured without and then beside the idle connections (0: none)")
	fs.Var(&c.Rate, "rate", "mean bytes per second per active source (0 unlimited)")
	fs.Var(&c.MsgSize, "msg-size", "message size of the active sources")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long the active sources send, in each of the two phases")
	fs.IntVar(&c.Burst, "burst", c.Burst, fmt.Sprintf("idle connections opened at once to time the sink's accept, and the step past it (default %d, or the first level if lower)", DefaultIdleBurst))
	fs.IntVar(&c.Listeners, "listeners", c.Listeners, "idle listeners, on 127.0.0.11 and up")
	fs.IntVar(&c.ClientConns, "client-conns", c.ClientConns, fmt.Sprintf("most idle connections per client process; more take more processes (default: the hard RLIMIT_NOFILE less %d)", idleFDMargin))
	fs.IntVar(&c.SourceAddrs, "source-addrs", c.SourceAddrs, fmt.Sprintf("source addresses of the idle clients, 127.0.0.101 and up (default: enough for at most %d connections per source and listener, and at least %d)", idlePerPair, idleMinSourceAddrs))
	fs.DurationVar(&c.Settle, "settle", c.Settle, "how long the sink is left alone at each level before it is sampled")
	fs.BoolVar(&c.Pin, "pin", c.Pin, "pin the sink to the engine's CPUs and the clients to the others (when there are 2 or more)")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.HeapProfile, "heap-profile", c.HeapProfile, "write the sink's heap profile at each level into `DIR` (diff two levels with go tool pprof -base)")
	fs.IntVar(&c.MemProfileRate, "memprofile-rate", c.MemProfileRate, "the sink's runtime.MemProfileRate with --heap-profile (default Go's 512KiB; 1 records every allocation)")
	c.Engine.Register(fs)
	c.Engine.RegisterListen(fs)
}

// Validate checks c, naming the flag at fault.
func (c IdleConfig) Validate() error {
	if err := bench.ValidRunners(c.Runners); err != nil {
		return err
	}
	if len(c.Idle) == 0 {
		return errors.New("--idle: at least one level")
	}
	for i, n := range c.Idle {
		if n < 1 {
			return fmt.Errorf("--idle: %d: levels must be at least 1", n)
		}
		if i > 0 && n <= c.Idle[i-1] {
			return fmt.Errorf("--idle: %v: levels must ascend", []int(c.Idle))
		}
	}
	switch {
	case c.Active < 0:
		return fmt.Errorf("--active: %d: must not be negative", c.Active)
	case c.Active > 0 && (c.MsgSize < load.TimestampSize || c.MsgSize > 16<<20):
		return fmt.Errorf("--msg-size: %d: must be from %d bytes to 16MiB", c.MsgSize, load.TimestampSize)
	case c.Rate < 0:
		return errors.New("--rate: must not be negative")
	case c.Active > 0 && c.Duration <= 0:
		return fmt.Errorf("--duration: %v: must be positive", c.Duration)
	case c.Burst < 0:
		return fmt.Errorf("--burst: %d: must not be negative", c.Burst)
	case c.Burst > c.Idle[0]:
		return fmt.Errorf("--burst: %d: must not exceed the first --idle level (%d)", c.Burst, c.Idle[0])
	case c.Listeners < 1 || c.Listeners > idleFirstSourceHost-idleFirstListenHost:
		return fmt.Errorf("--listeners: %d: must be from 1 to %d", c.Listeners, idleFirstSourceHost-idleFirstListenHost)
	case c.SourceAddrs < 0:
		return fmt.Errorf("--source-addrs: %d: must not be negative", c.SourceAddrs)
	case c.ClientConns < 0:
		return fmt.Errorf("--client-conns: %d: must not be negative", c.ClientConns)
	case c.Settle < 0:
		return fmt.Errorf("--settle: %v: must not be negative", c.Settle)
	case c.MemProfileRate < 0:
		return fmt.Errorf("--memprofile-rate: %d: must not be negative", c.MemProfileRate)
	case c.MemProfileRate > 0 && c.HeapProfile == "":
		return errors.New("--memprofile-rate: only with --heap-profile")
	case c.Engine.Framing != "" && c.Engine.Framing != "none":
		return errors.New("idle: the active streams are raw bytes (no --framing)")
	}
	if n := c.sourceAddrs(); n > idleLastHost-idleFirstSourceHost+1 {
		return fmt.Errorf("--idle: %d connections need %d source addresses, more than 127.0.0.%d-%d hold; add --listeners",
			c.Idle[len(c.Idle)-1], n, idleFirstSourceHost, idleLastHost)
	}
	if per := c.perPair(); per > idlePerPair {
		return fmt.Errorf("--source-addrs: %d connections over %d pairs is %d per (source, listener) pair, above %d; add addresses or listeners",
			c.Idle[len(c.Idle)-1], c.sourceAddrs()*c.Listeners, per, idlePerPair)
	}
	return c.Engine.Validate()
}

// idleHardNoFile raises this process's RLIMIT_NOFILE to what one process
// would need to hold every connection, the hard limit too where this
// process may (root), and returns the hard limit then, which the
// children inherit, at most the kernel's nr_open: the plan's H.
func (c IdleConfig) idleHardNoFile() (uint64, error) {
	want := uint64(c.Idle[len(c.Idle)-1] + c.Active + idleFDMargin)
	raiseNoFile(want) // as far as it may; the plan works within the rest
	return noFileHard()
}

// burst is the size of the timed burst.
func (c IdleConfig) burst() int {
	if c.Burst > 0 {
		return c.Burst
	}
	return min(DefaultIdleBurst, c.Idle[0])
}

// sourceAddrs is the number of source addresses the clients bind.
func (c IdleConfig) sourceAddrs() int {
	if c.SourceAddrs > 0 {
		return c.SourceAddrs
	}
	top := c.Idle[len(c.Idle)-1]
	per := idlePerPair * c.Listeners
	return max(idleMinSourceAddrs, (top+per-1)/per)
}

// perPair is the most connections one (source, listener) pair carries.
func (c IdleConfig) perPair() int {
	pairs := c.sourceAddrs() * c.Listeners
	return (c.Idle[len(c.Idle)-1] + pairs - 1) / pairs
}

// idleListenAddrs returns the idle listeners' addresses, port 0.
func idleListenAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("127.0.0.%d:0", idleFirstListenHost+i)
	}
	return out
}

// idleSourceAddrs returns the clients' source addresses.
func idleSourceAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("127.0.0.%d", idleFirstSourceHost+i)
	}
	return out
}

// IdleReport is the JSON report of `idle`.
type IdleReport struct {
	Command string          `json:"command"` // "idle"
	Host    harness.Host    `json:"host"`
	Pinning bench.Pinning   `json:"pinning"`
	Config  idleParams      `json:"config"`
	Runs    []*IdleRun      `json:"runs"`
	Skipped []bench.Skipped `json:"skipped"`
	Failed  []bench.Skipped `json:"failed"`
	Notes   []string        `json:"notes,omitempty"`
	Targets []IdleCheck     `json:"targets"`
	OK      bool            `json:"ok"` // every active stream verified
}

type idleParams struct {
	Idle        []int    `json:"idle"`
	Active      int      `json:"active"`
	RateBps     float64  `json:"rate_bps"` // per active source; 0 unlimited
	MsgSize     int64    `json:"msg_size"`
	DurationS   float64  `json:"duration_s"`
	Burst       int      `json:"burst"`
	Listeners   []string `json:"listeners"`    // the idle listeners, before binding
	SourceAddrs []string `json:"source_addrs"` // the idle clients'
	PerPair     int      `json:"max_per_pair"`
	// NoFileHard is the hard RLIMIT_NOFILE every process worked under
	// (at most nr_open); ClientConns the most connections per client
	// process (0: what that limit allows); FileSlots the --file-slots
	// asked for (0: the default; negative: none).
	NoFileHard  uint64  `json:"nofile_hard"`
	ClientConns int     `json:"client_conns"`
	FileSlots   int     `json:"file_slots"`
	SettleS     float64 `json:"settle_s"`
	Pool        int     `json:"pool"`
	Buf         int64   `json:"buf"`
	Workers     int     `json:"workers"`
	FlushNs     int64   `json:"flush_ns"`
}

// IdleRun is one runner's measurement.
type IdleRun struct {
	Runner string `json:"runner"`
	// Workers is the engine's resolved worker count; ThreadsTarget is
	// the bound on the sink's OS threads, workers + 16.
	Workers       int `json:"workers"`
	ThreadsMax    int `json:"threads_max"`
	ThreadsTarget int `json:"threads_target"`
	// FileSlots is each uring worker's registered file table as the
	// sink sized it (0: the other runners, or none).
	FileSlots int `json:"file_slots"`
	// Capped says why the levels are not --idle's: the sink could not
	// hold them (see IdleConfig.CapLevels).
	Capped string `json:"capped,omitempty"`
	// NoFile is RLIMIT_NOFILE as each child set it: the sink, and each
	// idle client process, ClientConns the connections each held at the
	// top level.
	SinkNoFile   NoFileLimit   `json:"sink_nofile"`
	ClientNoFile []NoFileLimit `json:"client_nofile"`
	ClientConns  []int         `json:"client_conns"`
	// Levels holds the sink and the kernel with no connection (idle 0,
	// after the first active phase when there is one) and at each idle
	// level.
	Levels []*IdleLevel `json:"levels"`
	// PerConn is the cost of one idle connection, between the first and
	// the last idle level (with one level: between 0 and it).
	PerConn IdlePerConn `json:"per_idle_conn"`
	Burst   IdleBurst   `json:"accept_burst"`
	// Without and With are the active load alone and beside the top
	// idle level; CPURatio is With's CPU-s/GiB over Without's.
	Without  *IdleActive `json:"active_without_idle,omitempty"`
	With     *IdleActive `json:"active_with_idle,omitempty"`
	CPURatio float64     `json:"cpu_ratio,omitempty"`
	// CloseS is how long the sink took to end every idle connection once
	// the clients reset them.
	CloseS   float64 `json:"close_s"`
	Errors   uint64  `json:"errors"` // source errors the sink saw, the resets included
	Verified bool    `json:"verified"`
}

// sinkShape says how r's sink ran: its workers and their file tables.
func (r *IdleRun) sinkShape() string { return idleSinkShape(r.Runner, r.Workers, r.FileSlots) }

// clientsNoFile writes the clients' RLIMIT_NOFILE, those alike together.
func clientsNoFile(ls []NoFileLimit) string {
	if len(ls) == 1 {
		return ls[0].String()
	}
	var parts []string
	for i := 0; i < len(ls); {
		j := i + 1
		for j < len(ls) && ls[j] == ls[i] {
			j++
		}
		who := fmt.Sprintf("client %d", i+1)
		if j > i+1 {
			who = fmt.Sprintf("clients %d-%d", i+1, j)
		}
		parts = append(parts, who+": "+ls[i].String())
		i = j
	}
	return strings.Join(parts, "; ")
}

// NoFileLimit is RLIMIT_NOFILE before and after a process raised it.
type NoFileLimit struct {
	Need       uint64 `json:"need"`
	SoftBefore uint64 `json:"soft_before"`
	HardBefore uint64 `json:"hard_before"`
	Soft       uint64 `json:"soft"`
	Hard       uint64 `json:"hard"`
}

func (l NoFileLimit) String() string {
	if l.Soft == l.SoftBefore {
		return fmt.Sprintf("%d (enough for %d)", l.Soft, l.Need)
	}
	s := fmt.Sprintf("raised from %d to %d", l.SoftBefore, l.Soft)
	if l.Hard != l.HardBefore {
		s += fmt.Sprintf(", hard limit from %d", l.HardBefore)
	}
	return s
}

// IdleLevel is the sink and the kernel at one idle level.
type IdleLevel struct {
	Idle int `json:"idle"`
	// OpenS is how long the connections added since the last level took
	// to open and reach the sink.
	OpenS float64 `json:"open_s"`
	// Sink is the sink process as found (the resident set as the garbage
	// collector left it); Scavenged is the same after a collection and
	// debug.FreeOSMemory, what stays.
	Sink      IdleMem   `json:"sink"`
	Scavenged IdleMem   `json:"sink_scavenged"`
	Kernel    KernelMem `json:"kernel"`
	// HeapProfile is the sink's heap profile here (--heap-profile).
	HeapProfile string `json:"heap_profile,omitempty"`
}

// IdleMem is the sink's memory and its runtime's view of it.
type IdleMem struct {
	RSS        int64  `json:"rss"`
	RSSAnon    int64  `json:"rss_anon"`
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	HeapObjs   uint64 `json:"heap_objects"`
	StackInuse uint64 `json:"stack_inuse"`
	// RuntimeMeta is the runtime's own bookkeeping: span structures, GC
	// metadata, and other runtime allocations off the heap.
	RuntimeMeta uint64 `json:"runtime_meta"`
	GoSys       uint64 `json:"go_sys"`
	Goroutines  int    `json:"goroutines"`
	Threads     int    `json:"threads"`
	// FDs is the descriptors the process holds (-1: unknown): under
	// uring, the connections in no worker's file table and the margin.
	FDs     int   `json:"fds"`
	Sources int64 `json:"sources"` // idle connections the sink holds
}

// KernelMem is the host's socket and slab memory (system-wide: both
// ends of every loopback connection, and anything else the host does).
type KernelMem struct {
	SocketsUsed int64 `json:"sockets_used"` // sockstat "sockets: used"
	TCPInuse    int64 `json:"tcp_inuse"`
	TCPOrphan   int64 `json:"tcp_orphan"`
	TCPTimeWait int64 `json:"tcp_tw"`
	TCPAlloc    int64 `json:"tcp_alloc"`
	TCPMemPages int64 `json:"tcp_mem_pages"` // buffer memory charged to TCP
	TCPMemBytes int64 `json:"tcp_mem_bytes"`
	// Slab is /proc/meminfo's Slab: every kernel object cache.
	Slab int64 `json:"slab"`
	// Caches are /proc/slabinfo's caches (root only): active objects and
	// their size.
	Caches map[string]SlabCache `json:"-"`
}

// SlabCache is one line of /proc/slabinfo.
type SlabCache struct {
	Objects int64 `json:"objects"`
	ObjSize int64 `json:"obj_size"`
}

// IdlePerConn is what one more idle connection cost, from the
// differences between two levels.
type IdlePerConn struct {
	From int `json:"from"`
	To   int `json:"to"`
	// RSS is the sink's resident set as found, RSSScavenged after a
	// collection and debug.FreeOSMemory; the rest are from the scavenged
	// samples.
	RSS          float64 `json:"rss"`
	RSSScavenged float64 `json:"rss_scavenged"`
	HeapInuse    float64 `json:"heap_inuse"`
	HeapObjects  float64 `json:"heap_objects"`
	StackInuse   float64 `json:"stack_inuse"`
	RuntimeMeta  float64 `json:"runtime_meta"`
	Goroutines   float64 `json:"goroutines"`
	// The kernel, for both ends of each connection (the clients' sockets
	// are the other half): sockets, TCP buffer memory, and all slab.
	Sockets     float64 `json:"kernel_sockets"`
	TCPMemBytes float64 `json:"kernel_tcp_mem"`
	SlabBytes   float64 `json:"kernel_slab"`
	// Caches are the slab caches that grew most (root only).
	Caches []SlabGrowth `json:"kernel_caches,omitempty"`
}

// SlabGrowth is one slab cache's growth per connection.
type SlabGrowth struct {
	Cache   string  `json:"cache"`
	Objects float64 `json:"objects"`
	Bytes   float64 `json:"bytes"`
}

// IdleBurst is the timed burst of idle connections.
type IdleBurst struct {
	Conns int `json:"conns"`
	// Seconds runs from the clients' first connect to the sink's
	// registering the last connection as a source. ClientS is the
	// clients' own part, until their last connect completed, and SinkS
	// the sink's, from its first registration to its last: when
	// ClientS is close to Seconds, the clients set the pace.
	Seconds   float64 `json:"seconds"`
	ClientS   float64 `json:"client_s"`
	SinkS     float64 `json:"sink_s"`
	ConnsPerS float64 `json:"conns_per_s"`
}

// IdleActive is one phase of the active load.
type IdleActive struct {
	Idle          int     `json:"idle"` // idle connections beside it
	Sources       int     `json:"sources"`
	Bytes         uint64  `json:"bytes"`
	DurationS     float64 `json:"duration_s"`
	ThroughputBps float64 `json:"throughput_bps"`
	// CPUS is the sink's CPU time (user+sys) from the first byte sent
	// until every active source ended.
	CPUS       float64 `json:"cpu_s"`
	CPUSPerGiB float64 `json:"cpu_s_per_gib"`
	// GenHeld is the share of the offered load the generator wrote on
	// time, and GenLagP99Ns its lag: a generator that fell behind makes
	// the phases incomparable.
	GenHeld     float64  `json:"gen_held"`
	GenLagP99Ns int64    `json:"gen_lag_p99_ns"`
	Verified    bool     `json:"verified"`
	Mismatches  []string `json:"mismatches,omitempty"`
}

// IdleCheck is one of the idle targets (memory and threads per idle
// connection), judged on one run.
type IdleCheck struct {
	Runner string `json:"runner"`
	Target string `json:"target"`
	Value  string `json:"value"`
	Met    bool   `json:"met"`
}

// Idle runs the `idle` command: every runner in turn, the table on
// ios.Out, and the optional JSON.
func Idle(ctx context.Context, c IdleConfig, ios harness.IO) (*IdleReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := idleSupported(); err != nil {
		return nil, err
	}
	exe, err := bench.Executable(c.Exe)
	if err != nil {
		return nil, err
	}
	runners, skipped, err := bench.PickRunners(c.Runners, defaultIdleRunners(), ios.Err)
	if err != nil {
		return nil, err
	}
	pin, unpin := bench.PinApart(c.Pin)
	defer unpin()
	hard, err := c.idleHardNoFile()
	if err != nil {
		return nil, fmt.Errorf("bench: idle: %w", err)
	}
	// After PinApart: the sink's default workers follow its CPUs.
	plans, unfit, err := c.planRunners(runners, hard)
	if err != nil {
		return nil, err
	}
	for _, s := range unfit {
		fmt.Fprintf(ios.Err, "sluice-bench idle: runner %s skipped: %s\n", s.Runner, s.Reason)
	}
	rep := &IdleReport{Command: "idle", Host: harness.HostInfo(), Pinning: pin, Skipped: append(skipped, unfit...), Failed: []bench.Skipped{}, Runs: []*IdleRun{}, OK: true,
		Config: idleParams{Idle: c.Idle, Active: c.Active, RateBps: float64(c.Rate), MsgSize: int64(c.MsgSize), DurationS: c.Duration.Seconds(),
			Burst: c.burst(), Listeners: idleListenAddrs(c.Listeners), SourceAddrs: idleSourceAddrs(c.sourceAddrs()), PerPair: c.perPair(),
			NoFileHard: hard, ClientConns: c.ClientConns, FileSlots: c.Engine.FileSlots,
			SettleS: c.Settle.Seconds(), Pool: c.Engine.Pool, Buf: int64(c.Engine.Buf), Workers: c.Engine.Workers, FlushNs: int64(c.Engine.Flush)}}
	rep.Notes = append(rep.Notes, idleNotes...)
	active := "no active sources"
	if c.Active > 0 {
		active = fmt.Sprintf("%d active sources at %s (%s messages, %v per phase)", c.Active, bench.RateOrUnlimited(c.Rate), report.FormatBytes(uint64(c.MsgSize)), c.Duration)
	}
	fmt.Fprintf(ios.Err, "sluice-bench idle: idle levels %s over %d listeners x %d source addresses (at most %s per pair), %s, hard RLIMIT_NOFILE %s, %s\n",
		commaList(c.Idle), c.Listeners, c.sourceAddrs(), humanize.Comma(int64(c.perPair())), active, humanize.Comma(int64(hard)), bench.PinNote(pin))
	for _, p := range plans {
		fmt.Fprintf(ios.Err, "sluice-bench idle: %s\n", p)
	}
	for _, plan := range plans {
		name := plan.Runner
		run, err := idleRunner(ctx, c, plan, exe, pin, ios)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			fmt.Fprintf(ios.Err, "sluice-bench idle: %s failed: %v\n", name, err)
			rep.Failed = append(rep.Failed, bench.Skipped{Runner: name, Reason: err.Error()})
			continue
		}
		rep.Runs = append(rep.Runs, run)
		rep.OK = rep.OK && run.Verified
	}
	if len(rep.Runs) == 0 {
		return nil, fmt.Errorf("bench: every runner failed; the first: %s", rep.Failed[0].Reason)
	}
	rep.Targets = idleTargets(rep.Runs)
	fmt.Fprintln(ios.Out)
	writeIdleTable(ios.Out, rep)
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	if !rep.OK {
		fmt.Fprintln(ios.Err, "sluice-bench idle: FAILED: a sink did not receive exactly what the generator sent (see MISMATCH lines)")
		return rep, bench.ErrMismatch
	}
	return rep, nil
}

// idleNotes qualify every idle report.
var idleNotes = []string{
	"per idle connection: the differences between the first and the last idle level, over the connections added between them; " +
		"the sink's figures are its process alone (the idle clients and the generator are processes of their own)",
	"rss is the sink's resident set as found after --settle; rss_scavenged, heap_inuse, stack_inuse and runtime_meta " +
		"are after runtime.GC and debug.FreeOSMemory, what the process keeps",
	"kernel figures are the host's (/proc/net/sockstat, /proc/meminfo Slab, /proc/slabinfo as root): both ends of each " +
		"loopback connection, the clients' sockets being the other half, and whatever else the host does meanwhile",
	"the idle clients hold raw sockets (no epoll registration) and reset them at the end (SO_LINGER 0), so that no TIME_WAIT outlives a run; " +
		"the sink counts the resets as source errors",
	"fds is the descriptors the sink held: a uring worker's connections in its registered file table (file_slots) need none",
}

// planRunners plans every runner under the hard limit (idle_plan.go).
// With CapLevels a runner that cannot hold even the first level is
// returned as skipped; without it any runner that cannot hold every
// level stops the command, as do client processes the limit cannot
// hold.
func (c IdleConfig) planRunners(runners []string, hard uint64) ([]idleRunnerPlan, []bench.Skipped, error) {
	per, err := c.idleClientConns(hard)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: idle: %w", err)
	}
	top := c.Idle[len(c.Idle)-1]
	if n := idleClientProcs(top, per); n > idleMaxClients {
		return nil, nil, fmt.Errorf("bench: idle: --idle %d takes %d client processes of at most %s connections each (--client-conns, or the hard RLIMIT_NOFILE of %s less %d), more than %d; lower --idle or raise the hard limit (ulimit -Hn, as root)",
			top, n, humanize.Comma(int64(per)), humanize.Comma(int64(hard)), idleFDMargin, idleMaxClients)
	}
	var plans []idleRunnerPlan
	var skipped []bench.Skipped
	var errs []error
	for _, r := range runners {
		p, err := c.plan(r, c.sinkWorkers(r), hard, per)
		switch {
		case err == nil:
			plans = append(plans, p)
		case c.CapLevels:
			skipped = append(skipped, bench.Skipped{Runner: r, Reason: err.Error()})
		default:
			errs = append(errs, err)
		}
	}
	switch {
	case len(errs) > 0:
		return nil, nil, fmt.Errorf("bench: idle: %w", errors.Join(errs...))
	case len(plans) == 0:
		return nil, skipped, fmt.Errorf("bench: idle: no runner's sink can hold the first level: %s", skipped[0].Reason)
	}
	return plans, skipped, nil
}

// sinkWorkers is the workers the sink of runner runs, which the parent
// passes on so that the plan holds: --workers, or the engine's default
// as this process resolves it (after PinApart, GOMAXPROCS counts the
// sink's CPUs).
func (c IdleConfig) sinkWorkers(runner string) int {
	if c.Engine.Workers > 0 {
		return c.Engine.Workers
	}
	if r, err := c.Engine.Config(runner).Resolved(); err == nil {
		return r.Workers
	}
	return min(runtime.GOMAXPROCS(0), 8)
}

// idleRunner measures one runner as plan says: see the comment at the
// top of the file.
func idleRunner(ctx context.Context, c IdleConfig, plan idleRunnerPlan, exe string, pin bench.Pinning, ios harness.IO) (*IdleRun, error) {
	runner, top := plan.Runner, plan.top()
	eng := c.Engine
	eng.Workers = plan.Workers
	sk, err := startIdleSink(ctx, exe, idleSinkSpec{Runner: runner, Engine: eng, IdleAddrs: idleListenAddrs(c.Listeners),
		ActiveAddr: idleActiveAddr, NoFile: plan.Need, NoFileHard: runner == engine.RunnerURing, MemProfileRate: c.MemProfileRate}, ios)
	if err != nil {
		return nil, err
	}
	defer sk.kill()
	cl, err := startIdleClients(ctx, exe, idleClientSpec{Dst: sk.ready.IdleAddrs, Src: idleSourceAddrs(c.sourceAddrs())},
		plan.Clients, top, pin.GenCPUs, ios)
	if err != nil {
		return nil, err
	}
	defer cl.kill()
	run := &IdleRun{Runner: runner, Workers: sk.ready.Workers, ThreadsTarget: sk.ready.Workers + 16, FileSlots: sk.ready.FileSlots,
		Capped: plan.Capped, SinkNoFile: sk.ready.NoFile, ClientNoFile: cl.noFile(), Verified: true}
	for i := range plan.Clients {
		run.ClientConns = append(run.ClientConns, idleShare(top, i, plan.Clients))
	}
	fmt.Fprintf(ios.Err, "%s: sink up%s, RLIMIT_NOFILE %s; %s up, RLIMIT_NOFILE %s\n",
		runner, run.sinkShape(), run.SinkNoFile, plural(plan.Clients, "idle client"), clientsNoFile(run.ClientNoFile))
	p := &idlePhase{c: c, plan: plan, runner: runner, exe: exe, pin: pin, ios: ios, sk: sk, cl: cl}

	if c.Active > 0 {
		if run.Without, err = p.active(ctx, 0, 0); err != nil {
			return nil, err
		}
	}
	lvl, err := p.level(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	run.Levels = append(run.Levels, lvl)
	if run.Burst, err = p.burst(ctx, c.burst()); err != nil {
		return nil, err
	}
	open := c.burst()
	for _, target := range plan.Levels {
		t0 := time.Now()
		for open < target {
			open = min(open+c.burst(), target)
			if err := p.openTo(ctx, open); err != nil {
				return nil, err
			}
		}
		lvl, err := p.level(ctx, target, time.Since(t0))
		if err != nil {
			return nil, err
		}
		run.Levels = append(run.Levels, lvl)
	}
	if c.Active > 0 {
		if run.With, err = p.active(ctx, 1, top); err != nil {
			return nil, err
		}
		if run.Without.CPUSPerGiB > 0 {
			run.CPURatio = run.With.CPUSPerGiB / run.Without.CPUSPerGiB
		}
		run.Verified = run.Without.Verified && run.With.Verified
	}
	if run.CloseS, err = p.closeAll(ctx, top); err != nil {
		return nil, err
	}
	st, err := sk.stop()
	if err != nil {
		return nil, err
	}
	run.ThreadsMax, run.Errors = st.ThreadsMax, st.Errors
	from := run.Levels[0]
	if len(plan.Levels) > 1 {
		from = run.Levels[1]
	}
	run.PerConn = perIdleConn(from, run.Levels[len(run.Levels)-1])
	fmt.Fprintf(ios.Err, "%s: %s B of RSS per idle connection (%s B after scavenging), %.0f B of kernel slab (both ends); threads %d; accept %s in %.3fs\n",
		runner, humanize.Comma(int64(run.PerConn.RSS)), humanize.Comma(int64(run.PerConn.RSSScavenged)), run.PerConn.SlabBytes,
		run.ThreadsMax, humanize.Comma(int64(run.Burst.Conns)), run.Burst.Seconds)
	return run, nil
}

// idlePhase carries one runner's processes through its phases.
type idlePhase struct {
	c      IdleConfig
	plan   idleRunnerPlan
	runner string
	exe    string
	pin    bench.Pinning
	ios    harness.IO
	sk     *idleSink
	cl     *idleClients
	// activeSeen is the active sources the sink has registered so far.
	activeSeen int64
}

// burst opens n idle connections at once and times the sink's accept.
func (p *idlePhase) burst(ctx context.Context, n int) (IdleBurst, error) {
	if _, err := p.sk.call(idleReq{Op: opArm, Target: int64(n)}); err != nil {
		return IdleBurst{}, err
	}
	opened, err := p.openAndWait(ctx, n)
	if err != nil {
		return IdleBurst{}, err
	}
	cn, err := p.sk.counts()
	if err != nil {
		return IdleBurst{}, err
	}
	b := IdleBurst{Conns: n, ClientS: time.Duration(opened.EndNs - opened.StartNs).Seconds(),
		Seconds: time.Duration(cn.ReachedNs - opened.StartNs).Seconds(), SinkS: time.Duration(cn.ReachedNs - cn.FirstNs).Seconds()}
	if b.Seconds > 0 {
		b.ConnsPerS = float64(n) / b.Seconds
	}
	fmt.Fprintf(p.ios.Err, "%s: burst of %s idle connections registered by the sink in %.3fs (%s/s; the clients' connects took %.3fs, the sink's first to last registration %.3fs)\n",
		p.runner, humanize.Comma(int64(n)), b.Seconds, humanize.Comma(int64(b.ConnsPerS)), b.ClientS, b.SinkS)
	return b, nil
}

// openTo opens idle connections up to n and waits for the sink to hold
// them.
func (p *idlePhase) openTo(ctx context.Context, n int) error {
	t0 := time.Now()
	if _, err := p.openAndWait(ctx, n); err != nil {
		return err
	}
	fmt.Fprintf(p.ios.Err, "%s: %s idle connections open, all in the sink (+%.2fs)\n", p.runner, humanize.Comma(int64(n)), time.Since(t0).Seconds())
	return nil
}

// openAndWait has the clients open up to n connections, then waits until
// the sink has registered n idle sources, failing if it ends any.
func (p *idlePhase) openAndWait(ctx context.Context, n int) (*idleOpened, error) {
	type res struct {
		o   *idleOpened
		err error
	}
	done := make(chan res, 1)
	go func() {
		o, err := p.cl.open(n)
		done <- res{o, err}
	}()
	var opened *idleOpened
	deadline := time.Now().Add(idleStepTimeout)
	lastLine := time.Now()
	held, heldSince := int64(-1), time.Now()
	tick := time.NewTicker(idlePoll)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return nil, r.err
			}
			opened, done = r.o, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		cn, err := p.sk.counts()
		if err != nil {
			return nil, err
		}
		if cn.IdleEnded > 0 {
			first := "none reported"
			if len(cn.ErrorSamples) > 0 {
				first = cn.ErrorSamples[0]
			}
			return nil, fmt.Errorf("bench: the sink ended %d idle connections while they were being opened (%d source errors; the first: %s)",
				cn.IdleEnded, cn.Errors, first)
		}
		if opened != nil && cn.IdleAdded >= int64(n) {
			return opened, nil
		}
		now := time.Now()
		if cn.IdleAdded != held {
			held, heldSince = cn.IdleAdded, now
		} else if now.Sub(heldSince) >= idleStall {
			if err := p.outOfFDs(held); err != nil {
				return nil, err
			}
			heldSince = now
		}
		if now.After(deadline) {
			return nil, fmt.Errorf("bench: after %v the clients had opened %s and the sink held %s of %s idle connections",
				idleStepTimeout, openedCount(opened), humanize.Comma(cn.IdleAdded), humanize.Comma(int64(n)))
		}
		if now.Sub(lastLine) >= idleQuietLine {
			fmt.Fprintf(p.ios.Err, "%s: waiting for %s idle connections: the sink holds %s\n", p.runner, humanize.Comma(int64(n)), humanize.Comma(cn.IdleAdded))
			lastLine = now
		}
	}
}

// outOfFDs fails when the sink, its count of idle connections standing
// at idle, holds as many descriptors as its soft RLIMIT_NOFILE allows,
// so that it cannot accept another.
func (p *idlePhase) outOfFDs(idle int64) error {
	r, err := p.sk.call(idleReq{Op: opCounts, FDs: true})
	if err != nil {
		return err
	}
	soft := p.sk.ready.NoFile.Soft
	if r.Counts == nil || r.Counts.FDs < 0 || uint64(r.Counts.FDs)+idleFDSlack < soft {
		return nil
	}
	msg := fmt.Sprintf("bench: the sink ran out of descriptors at %s idle connections: it holds %s, all its soft RLIMIT_NOFILE of %s allows",
		humanize.Comma(idle), humanize.Comma(int64(r.Counts.FDs)), humanize.Comma(int64(soft)))
	if p.plan.Slots > 0 && int64(r.Counts.FDs) >= idle {
		tables := fmt.Sprintf("the file table of its worker (%s slots)", humanize.Comma(int64(p.plan.Slots)))
		if p.plan.Workers > 1 {
			tables = fmt.Sprintf("the file tables of its %d workers (%s slots each)", p.plan.Workers, humanize.Comma(int64(p.plan.Slots)))
		}
		msg += fmt.Sprintf("; the plan counted on %s to hold the connections, but it holds a descriptor for each", tables)
	}
	return errors.New(msg)
}

// idleFDSlack is how far below its soft limit a sink's descriptor count
// may be and still be out of descriptors: an accept in progress holds
// one a moment.
const idleFDSlack = 4

func openedCount(o *idleOpened) string {
	if o == nil {
		return "not yet all"
	}
	return humanize.Comma(o.Open)
}

// level lets the sink settle at idle connections, then samples it and
// the kernel.
func (p *idlePhase) level(ctx context.Context, idle int, took time.Duration) (*IdleLevel, error) {
	if err := p.settle(ctx); err != nil {
		return nil, err
	}
	heap := ""
	if p.c.HeapProfile != "" {
		heap = fmt.Sprintf("%s/heap-%s-%d.pprof", strings.TrimRight(p.c.HeapProfile, "/"), p.runner, idle)
	}
	r, err := p.sk.call(idleReq{Op: opSample, HeapProfile: heap})
	if err != nil {
		return nil, err
	}
	if r.Sample == nil {
		return nil, errors.New("bench: idle sink: no sample")
	}
	k, err := readKernelMem()
	if err != nil {
		return nil, err
	}
	l := &IdleLevel{Idle: idle, OpenS: took.Seconds(), Sink: r.Sample.Raw, Scavenged: r.Sample.Scavenged, Kernel: k, HeapProfile: r.Sample.HeapProfile}
	if l.Sink.Sources != int64(idle) {
		return nil, fmt.Errorf("bench: at %d idle connections the sink holds %d", idle, l.Sink.Sources)
	}
	fmt.Fprintf(p.ios.Err, "%s: %s idle: RSS %s (%s scavenged), Go heap %s, stacks %s, %s goroutines, %d threads, %s descriptors; kernel: %s sockets, slab %s\n",
		p.runner, humanize.Comma(int64(idle)), report.FormatBytes(uint64(l.Sink.RSS)), report.FormatBytes(uint64(l.Scavenged.RSS)),
		report.FormatBytes(l.Scavenged.HeapInuse), report.FormatBytes(l.Scavenged.StackInuse), humanize.Comma(int64(l.Scavenged.Goroutines)),
		l.Sink.Threads, humanize.Comma(int64(l.Sink.FDs)), humanize.Comma(k.SocketsUsed), report.FormatBytes(uint64(k.Slab)))
	return l, nil
}

// settle waits Settle, and then until the sink's goroutine count holds
// still (the engine's per-connection tasks have ended).
func (p *idlePhase) settle(ctx context.Context) error {
	if p.c.Settle == 0 {
		return nil
	}
	t := time.NewTimer(p.c.Settle)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	prev := -1
	for range 50 {
		cn, err := p.sk.counts()
		if err != nil {
			return err
		}
		if cn.Goroutines == prev {
			return nil
		}
		prev = cn.Goroutines
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// active runs the active load once, beside idle idle connections, and
// reconciles every stream.
func (p *idlePhase) active(ctx context.Context, round, idle int) (*IdleActive, error) {
	c := p.c
	label := fmt.Sprintf("%s: active, %s idle", p.runner, humanize.Comma(int64(idle)))
	w := bench.Workload{Runner: p.runner, Round: round, Sources: c.Active, Duration: c.Duration, MsgSize: c.MsgSize, Rate: c.Rate,
		Arrivals: load.ArrivalsPoisson, MaxDial: load.DefaultMaxDial, Verify: true, Engine: c.Engine, Exe: p.exe, GenCPUs: p.pin.GenCPUs, Label: label}
	g, err := bench.StartGen(ctx, w, p.sk.ready.ActiveAddr, nil, p.ios)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*IdleActive, error) {
		g.Kill()
		return nil, err
	}
	want := p.activeSeen + int64(c.Active)
	for deadline := time.Now().Add(bench.DialLimit(c.Active)); ; {
		cn, err := p.sk.counts()
		if err != nil {
			return fail(err)
		}
		if cn.ActiveAdded >= want {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("bench: only %d of %d active connections reached the sink", cn.ActiveAdded-p.activeSeen, c.Active))
		}
		time.Sleep(idlePoll)
	}
	p.activeSeen = want
	c0, err := p.sk.counts()
	if err != nil {
		return fail(err)
	}
	if err := g.Send(); err != nil {
		return fail(err)
	}
	t0 := time.Now()
	fmt.Fprintf(p.ios.Err, "%s: sending for %v\n", label, c.Duration)
	var rep load.GenReport
	got := false
	endLimit := time.Now().Add(c.Duration + load.FlushGrace + 60*time.Second)
	lastLine, lastBytes := t0, c0.Bytes
	lines := g.Lines
	var c1 *idleCounts
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return fail(errors.New("bench: generator exited without a report"))
			}
			if rep, err = bench.DecodeGenReport(l); err != nil {
				return fail(err)
			}
			got, lines = true, nil
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(idlePoll):
		}
		cn, err := p.sk.counts()
		if err != nil {
			return fail(err)
		}
		if got && cn.ActiveEnded >= want {
			c1 = cn
			break
		}
		now := time.Now()
		if now.After(endLimit) {
			return fail(fmt.Errorf("bench: %d of %d active sources ended a minute after the generator's duration", cn.ActiveEnded-(want-int64(c.Active)), c.Active))
		}
		if now.Sub(lastLine) >= idleQuietLine {
			fmt.Fprintf(p.ios.Err, "%s: %s elapsed, %s, %s\n", label, now.Sub(t0).Round(time.Second), report.FormatBytes(cn.Bytes-c0.Bytes),
				report.FormatRate(float64(cn.Bytes-lastBytes)/now.Sub(lastLine).Seconds()))
			lastLine, lastBytes = now, cn.Bytes
		}
	}
	t1 := time.Now()
	if err := g.Wait(); err != nil {
		return nil, err
	}
	r, err := p.sk.call(idleReq{Op: opStreams})
	if err != nil {
		return nil, err
	}
	a := &IdleActive{Idle: idle, Sources: c.Active, Bytes: c1.Bytes - c0.Bytes, DurationS: t1.Sub(t0).Seconds(),
		CPUS: time.Duration(c1.CPUNs - c0.CPUNs).Seconds(), GenHeld: rep.HeldFraction(), GenLagP99Ns: rep.LagNs.P99}
	a.ThroughputBps = float64(a.Bytes) / a.DurationS
	a.CPUSPerGiB = bench.CPUPerGiB(a.CPUS, a.Bytes)
	got2 := make([]*bench.Stream, len(r.Streams))
	for i, s := range r.Streams {
		got2[i] = &bench.Stream{Name: s.Peer, Bytes: s.Bytes, CRC: s.CRC}
	}
	_, _, a.Mismatches = bench.Reconcile(got2, rep.Streams, true, 0)
	if len(r.Streams) != c.Active {
		a.Mismatches = append(a.Mismatches, fmt.Sprintf("the sink ended %d active sources, the generator opened %d", len(r.Streams), c.Active))
	}
	a.Verified = len(a.Mismatches) == 0
	for _, m := range a.Mismatches {
		fmt.Fprintf(p.ios.Err, "MISMATCH %s: %s\n", p.runner, m)
	}
	fmt.Fprintf(p.ios.Err, "%s: %s in %.2fs, %s, %.3f CPU-s/GiB, generator held %.1f%%, verified %v\n", label, report.FormatBytes(a.Bytes), a.DurationS,
		report.FormatRate(a.ThroughputBps), a.CPUSPerGiB, 100*a.GenHeld, a.Verified)
	return a, nil
}

// closeAll resets every idle connection and waits until the sink has
// ended them all; it returns how long that took.
func (p *idlePhase) closeAll(ctx context.Context, n int) (float64, error) {
	t0 := time.Now()
	if err := p.cl.reset(); err != nil {
		return 0, err
	}
	lastLine := t0
	for {
		cn, err := p.sk.counts()
		if err != nil {
			return 0, err
		}
		if cn.IdleEnded >= int64(n) {
			break
		}
		now := time.Now()
		if now.Sub(t0) > idleCloseTimeout {
			return 0, fmt.Errorf("bench: %v after the reset the sink still held %d idle connections", idleCloseTimeout, int64(n)-cn.IdleEnded)
		}
		if now.Sub(lastLine) >= idleQuietLine {
			fmt.Fprintf(p.ios.Err, "%s: the sink ended %s of %s idle connections\n", p.runner, humanize.Comma(cn.IdleEnded), humanize.Comma(int64(n)))
			lastLine = now
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(idlePoll):
		}
	}
	s := time.Since(t0).Seconds()
	fmt.Fprintf(p.ios.Err, "%s: %s idle connections reset; the sink ended them all in %.2fs\n", p.runner, humanize.Comma(int64(n)), s)
	return s, nil
}

// perIdleConn divides the growth from a to b by the connections added.
func perIdleConn(a, b *IdleLevel) IdlePerConn {
	pc := IdlePerConn{From: a.Idle, To: b.Idle}
	n := float64(b.Idle - a.Idle)
	if n <= 0 {
		return pc
	}
	d := func(x, y int64) float64 { return float64(y-x) / n }
	du := func(x, y uint64) float64 { return (float64(y) - float64(x)) / n }
	pc.RSS = d(a.Sink.RSS, b.Sink.RSS)
	pc.RSSScavenged = d(a.Scavenged.RSS, b.Scavenged.RSS)
	pc.HeapInuse = du(a.Scavenged.HeapInuse, b.Scavenged.HeapInuse)
	pc.HeapObjects = du(a.Scavenged.HeapObjs, b.Scavenged.HeapObjs)
	pc.StackInuse = du(a.Scavenged.StackInuse, b.Scavenged.StackInuse)
	pc.RuntimeMeta = du(a.Scavenged.RuntimeMeta, b.Scavenged.RuntimeMeta)
	pc.Goroutines = d(int64(a.Scavenged.Goroutines), int64(b.Scavenged.Goroutines))
	pc.Sockets = d(a.Kernel.SocketsUsed, b.Kernel.SocketsUsed)
	pc.TCPMemBytes = d(a.Kernel.TCPMemBytes, b.Kernel.TCPMemBytes)
	pc.SlabBytes = d(a.Kernel.Slab, b.Kernel.Slab)
	for name, cb := range b.Kernel.Caches {
		ca := a.Kernel.Caches[name]
		objs := d(ca.Objects, cb.Objects)
		bytes := (float64(cb.Objects*cb.ObjSize) - float64(ca.Objects*ca.ObjSize)) / n
		if bytes >= 8 {
			pc.Caches = append(pc.Caches, SlabGrowth{Cache: name, Objects: objs, Bytes: bytes})
		}
	}
	slices.SortFunc(pc.Caches, func(x, y SlabGrowth) int { return int(y.Bytes - x.Bytes) })
	pc.Caches = pc.Caches[:min(len(pc.Caches), 10)]
	return pc
}

// idleTargets judges the idle targets on each run.
func idleTargets(runs []*IdleRun) []IdleCheck {
	var out []IdleCheck
	var goroutineBurst float64
	for _, r := range runs {
		if r.Runner == "goroutine" {
			goroutineBurst = r.Burst.Seconds
		}
	}
	for _, r := range runs {
		if r.Runner == "uring" {
			out = append(out, IdleCheck{r.Runner, "RSS per added idle connection <= 512 B",
				fmt.Sprintf("%.0f B (%.0f B scavenged)", r.PerConn.RSS, r.PerConn.RSSScavenged), r.PerConn.RSS <= 512})
			if goroutineBurst > 0 {
				out = append(out, IdleCheck{r.Runner, "accept burst no slower than goroutine's",
					fmt.Sprintf("%.3fs vs %.3fs", r.Burst.Seconds, goroutineBurst), r.Burst.Seconds <= goroutineBurst})
			}
		}
		out = append(out, IdleCheck{r.Runner, fmt.Sprintf("threads <= workers + 16 (%d)", r.ThreadsTarget),
			strconv.Itoa(r.ThreadsMax), r.ThreadsMax <= r.ThreadsTarget})
		if r.With != nil && r.Without != nil {
			out = append(out, IdleCheck{r.Runner, "active CPU-s/GiB beside the idle within 10% of without",
				fmt.Sprintf("%.3f vs %.3f (%.2fx)", r.With.CPUSPerGiB, r.Without.CPUSPerGiB, r.CPURatio), math.Abs(r.CPURatio-1) <= 0.1})
		}
	}
	return out
}

// writeIdleTable prints one row per runner, then the levels, the
// kernel's caches and the targets.
func writeIdleTable(w io.Writer, rep *IdleReport) {
	c := rep.Config
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "runner\tidle\tRSS/conn\tscavenged\tGo heap\tstacks\truntime\tgoroutines\tkernel slab\tsockets\tthreads\taccept burst\tCPU-s/GiB alone\tbeside idle\tratio\tverified\t\n")
	for _, r := range rep.Runs {
		pc := r.PerConn
		alone, beside, ratio := "-", "-", "-"
		if r.Without != nil && r.With != nil {
			alone, beside, ratio = fmt.Sprintf("%.3f", r.Without.CPUSPerGiB), fmt.Sprintf("%.3f", r.With.CPUSPerGiB), fmt.Sprintf("%.2fx", r.CPURatio)
		}
		fmt.Fprintf(tw, "%s\t%s-%s\t%.0f B\t%.0f B\t%.0f B\t%.0f B\t%.0f B\t%.3f\t%.0f B\t%.2f\t%d/%d\t%.3fs\t%s\t%s\t%s\t%v\t\n",
			r.Runner, shortCount(pc.From), shortCount(pc.To), pc.RSS, pc.RSSScavenged, pc.HeapInuse, pc.StackInuse, pc.RuntimeMeta,
			pc.Goroutines, pc.SlabBytes, pc.Sockets, r.ThreadsMax, r.ThreadsTarget, r.Burst.Seconds, alone, beside, ratio, r.Verified)
	}
	tw.Flush()
	fmt.Fprintln(w, "(per idle connection; kernel columns are both ends of each loopback connection; threads are the sink's most against workers + 16)")
	fmt.Fprintln(w)
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "%s levels:", r.Runner)
		for _, l := range r.Levels {
			fmt.Fprintf(w, "  %s idle: RSS %s (scavenged %s, heap %s, stacks %s), %s descriptors;", humanize.Comma(int64(l.Idle)),
				report.FormatBytes(uint64(l.Sink.RSS)), report.FormatBytes(uint64(l.Scavenged.RSS)), report.FormatBytes(l.Scavenged.HeapInuse), report.FormatBytes(l.Scavenged.StackInuse),
				humanize.Comma(int64(l.Sink.FDs)))
		}
		fmt.Fprintln(w)
		if len(r.PerConn.Caches) > 0 {
			fmt.Fprintf(w, "%s kernel caches per connection:", r.Runner)
			for _, g := range r.PerConn.Caches {
				fmt.Fprintf(w, " %s %.0f B (%.2f objects);", g.Cache, g.Bytes, g.Objects)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: burst of %s accepted in %.3fs (%s/s; the clients' connects %.3fs, the sink's first to last %.3fs); reset and ended in %.2fs\n",
			r.Runner, humanize.Comma(int64(r.Burst.Conns)), r.Burst.Seconds, humanize.Comma(int64(r.Burst.ConnsPerS)), r.Burst.ClientS, r.Burst.SinkS, r.CloseS)
		fmt.Fprintf(w, "%s: sink%s, RLIMIT_NOFILE %s; %s holding %s, RLIMIT_NOFILE %s\n", r.Runner, r.sinkShape(), r.SinkNoFile,
			plural(len(r.ClientNoFile), "idle client process"), commaList(r.ClientConns), clientsNoFile(r.ClientNoFile))
		if r.Capped != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Runner, r.Capped)
		}
	}
	for _, s := range rep.Failed {
		fmt.Fprintf(w, "failed %s: %s\n", s.Runner, s.Reason)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Runner, s.Reason)
	}
	for _, t := range rep.Targets {
		verdict := "missed"
		if t.Met {
			verdict = "met"
		}
		fmt.Fprintf(w, "target %s: %s: %s: %s\n", t.Runner, t.Target, t.Value, verdict)
	}
	fmt.Fprintf(w, "kernel %s, %s, %d CPUs; %s\n", rep.Host.Kernel, rep.Host.Go, rep.Host.CPUs, bench.PinNote(rep.Pinning))
	fmt.Fprintf(w, "workload: idle %s over %d listeners x %d source addresses; %d active at %s, %s messages, %.1fs per phase; hard RLIMIT_NOFILE %s\n",
		commaList(c.Idle), len(c.Listeners), len(c.SourceAddrs), c.Active, bench.RateOrUnlimited(report.Rate(c.RateBps)), report.FormatBytes(uint64(c.MsgSize)), c.DurationS,
		humanize.Comma(int64(c.NoFileHard)))
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// shortCount writes 10000 as 10k.
func shortCount(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

func commaList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = humanize.Comma(int64(n))
	}
	return strings.Join(s, ", ")
}
