package idle

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
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
