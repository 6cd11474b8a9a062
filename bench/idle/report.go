package idle

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
)

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
