package soak

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
)

// Tolerances of the leak check. Descriptors, goroutines, pool buffers,
// sources and lanes must come back exactly. Threads may stay above their
// starting level by soakThreadSlack: the Go runtime starts a thread when
// a goroutine blocks in a system call while others are ready to run
// (thousands of connections ending at once make as many close(2) calls,
// the tail's writes and copies block on the file system), and it parks
// that thread for reuse and never ends it. Such threads wait in futex(2)
// and their number follows the peak of blocking calls, not the work done
// (in one ten-minute run of the default load, 9 threads at the start were
// 21 at the end, the 12 more all parked). A thread that runs a goroutine is counted by the
// goroutines, which must come back exactly. The resident set may stay
// soakRSSSlack above its level after the warm-up, after a forced garbage
// collection that returns freed memory to the system: maps and queues
// keep the capacity of their largest size, and the allocator keeps some
// spans.
//
// Under the race detector the resident set is not comparable (see
// compareLevels), and the live Go heap and stacks stand in for it, with
// soakRaceSlack more: the runtime keeps the descriptor of every goroutine
// it made, the engine's delivery queues and lane tables keep their
// largest size, and all of them follow the highest concurrency, which
// the main run may pass the warm-up's by a few hundred goroutines and
// lanes; on a live heap of about 10 MiB that alone is more than 10%.
const (
	soakThreadSlack = 32
	soakRSSSlack    = 0.10
	soakRaceSlack   = 4 << 20
)

// SoakLevels are the resources the soak watches. Sources counts the
// engine's live sources (pool accounts), Lanes the lanes its runners
// drive. GoBytes is what the Go runtime holds live: heap objects and
// goroutine stacks (runtime/metrics), which a leak of Go values grows,
// and which a race detector's shadow memory does not inflate.
type SoakLevels struct {
	FDs        int   `json:"fds"`
	Goroutines int   `json:"goroutines"`
	Threads    int   `json:"threads"`
	RSSBytes   int64 `json:"rss_bytes"`
	GoBytes    int64 `json:"go_bytes"` // live heap objects and goroutine stacks
	PoolInUse  int   `json:"pool_in_use"`
	Sources    int   `json:"sources"`
	Lanes      int   `json:"lanes"`
}

// SoakSample is one progress line: the levels and the load's counters
// T seconds into the load.
type SoakSample struct {
	T float64 `json:"t_s"`
	SoakLevels
	ConnsOpen   int64  `json:"conns_open"`
	Opened      uint64 `json:"opened"`
	Closed      uint64 `json:"closed"`
	EngineBytes uint64 `json:"engine_bytes"`
}

// levels reads the watched resources now.
func (r *soakRun) levels() SoakLevels {
	ps := r.e.Pool().Stats()
	lanes := 0
	for _, rs := range r.e.Stats().Runners {
		lanes += rs.Lanes
	}
	threads, rss := harness.ProcUsage()
	fds, _ := openFDs()
	ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(ms)
	return SoakLevels{FDs: fds, Goroutines: runtime.NumGoroutine(), Threads: threads, RSSBytes: rss,
		GoBytes: int64(ms[0].Value.Uint64() + ms[1].Value.Uint64()), PoolInUse: ps.InUse, Sources: ps.Accounts, Lanes: lanes}
}

// settledLevels waits, up to Settle, for the counts that come back by
// themselves (goroutines that end, descriptors closed, sources and lanes
// removed, buffers released) to stop falling, and with back, to be at
// back's levels or below; then it collects garbage and returns freed
// memory to the system before reading the resident set. The counts are
// read again after the collection: a source that woke meanwhile (a
// keepalive's reply from the broker, a datagram) holds a buffer for a
// flush timeout, so with back they are read until they are back or the
// deadline passes. A leak stays and is reported; a passing moment is not
// one.
func (r *soakRun) settledLevels(back *SoakLevels) SoakLevels {
	deadline := time.Now().Add(r.cfg.Settle)
	isBack := func(l SoakLevels) bool {
		return back == nil || (l.FDs <= back.FDs && l.Goroutines <= back.Goroutines && l.PoolInUse <= back.PoolInUse &&
			l.Sources == back.Sources && l.Lanes <= back.Lanes)
	}
	prev := r.levels()
	stable := 0
	for time.Now().Before(deadline) && stable < 10 {
		time.Sleep(50 * time.Millisecond)
		l := r.levels()
		if l.FDs == prev.FDs && l.Goroutines == prev.Goroutines && l.PoolInUse == prev.PoolInUse &&
			l.Sources == prev.Sources && l.Lanes == prev.Lanes && isBack(l) {
			stable++
		} else {
			stable = 0
		}
		prev = l
	}
	runtime.GC()
	runtime.GC() // the second empties sync.Pool's victim caches
	debug.FreeOSMemory()
	l := r.levels()
	for !isBack(l) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		l = r.levels()
	}
	return l
}

// compareLevels lists what did not come back: every count to its level
// before any load, and memory to its level after the warm-up. Memory is
// the resident set, except under the race detector, whose shadow memory
// and per-goroutine history grow with every goroutine it has seen and are
// never returned: there it is the Go runtime's live heap and stacks.
func compareLevels(start, warm, end SoakLevels) []string {
	var leaks []string
	exact := func(name string, a, b int) {
		if b > a {
			leaks = append(leaks, fmt.Sprintf("%s: %d at the start, %d after the load (+%d)", name, a, b, b-a))
		}
	}
	exact("open descriptors", start.FDs, end.FDs)
	exact("goroutines", start.Goroutines, end.Goroutines)
	exact("pool buffers in use", start.PoolInUse, end.PoolInUse)
	exact("lanes", start.Lanes, end.Lanes)
	if end.Sources != start.Sources {
		leaks = append(leaks, fmt.Sprintf("live sources: %d at the start, %d after the load", start.Sources, end.Sources))
	}
	if end.Threads > start.Threads+soakThreadSlack {
		leaks = append(leaks, fmt.Sprintf("OS threads: %d at the start, %d after the load (more than %d above)",
			start.Threads, end.Threads, soakThreadSlack))
	}
	what, a, b, slack := "resident memory", warm.RSSBytes, end.RSSBytes, 0.0
	if raceDetector {
		what, a, b, slack = "live Go heap and stacks", warm.GoBytes, end.GoBytes, soakRaceSlack
	}
	if float64(b) > float64(a)*(1+soakRSSSlack)+slack {
		more := fmt.Sprintf("%.0f%%", 100*soakRSSSlack)
		if slack > 0 {
			more += " and " + report.FormatBytes(uint64(slack))
		}
		leaks = append(leaks, fmt.Sprintf("%s: %s after the warm-up, %s after the load (more than %s above)",
			what, report.FormatBytes(uint64(a)), report.FormatBytes(uint64(b)), more))
	}
	return leaks
}

// fdDiff lists the kinds of descriptor that grew from a to b.
func fdDiff(a, b map[string]int) string {
	var parts []string
	for k, n := range b {
		if n > a[k] {
			parts = append(parts, fmt.Sprintf("%d more %s", n-a[k], k))
		}
	}
	if len(parts) == 0 {
		return "of no kind that grew"
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func formatLevels(l SoakLevels) string {
	return fmt.Sprintf("fds %s, goroutines %s, threads %d, RSS %s (Go %s), pool in use %d, sources %s, lanes %s",
		humanize.Comma(int64(l.FDs)), humanize.Comma(int64(l.Goroutines)), l.Threads, report.FormatBytes(uint64(max(l.RSSBytes, 0))),
		report.FormatBytes(uint64(max(l.GoBytes, 0))),
		l.PoolInUse, humanize.Comma(int64(l.Sources)), humanize.Comma(int64(l.Lanes)))
}

// soakProgress samples the levels every Progress and prints a line.
type soakProgress struct {
	stop chan struct{}
	done chan struct{}
}

func (r *soakRun) startProgress(t0 time.Time) *soakProgress {
	p := &soakProgress{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(r.cfg.Progress)
		defer t.Stop()
		var last SoakSample
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				s := r.sample(now.Sub(t0))
				secs := s.T - last.T
				fmt.Fprintf(r.ios.Err, "soak %5.0fs: conns %s open (peak %s), +%s/s -%s/s, %s received; %s%s\n",
					s.T, humanize.Comma(s.ConnsOpen), humanize.Comma(r.streams.peak.Load()),
					humanize.Comma(int64(float64(s.Opened-last.Opened)/secs)), humanize.Comma(int64(float64(s.Closed-last.Closed)/secs)),
					report.FormatBytes(s.EngineBytes), formatLevels(s.SoakLevels), r.otherNote())
				last = s
			}
		}
	}()
	return p
}

func (p *soakProgress) finish() {
	close(p.stop)
	<-p.done
}

// sample records the levels and counters at el into the run's samples.
func (r *soakRun) sample(el time.Duration) SoakSample {
	l := r.levels()
	s := SoakSample{T: el.Seconds(), SoakLevels: l, ConnsOpen: r.streams.open.Load(),
		Opened: r.streams.opened.Load(), Closed: r.streams.closed.Load(), EngineBytes: r.e.Totals().Bytes}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	p := &r.peak
	p.FDs, p.Goroutines, p.Threads = max(p.FDs, l.FDs), max(p.Goroutines, l.Goroutines), max(p.Threads, l.Threads)
	p.RSSBytes, p.GoBytes, p.PoolInUse = max(p.RSSBytes, l.RSSBytes), max(p.GoBytes, l.GoBytes), max(p.PoolInUse, l.PoolInUse)
	p.Sources, p.Lanes = max(p.Sources, l.Sources), max(p.Lanes, l.Lanes)
	return s
}

// otherNote is the progress line's tail: the other sources' counts.
func (r *soakRun) otherNote() string {
	var b strings.Builder
	if r.udp != nil {
		fmt.Fprintf(&b, "; udp %s received", humanize.Comma(int64(r.chk.udp.received.Load())))
	}
	if r.tailW != nil {
		fmt.Fprintf(&b, "; tail line %s of %s", humanize.Comma(int64(r.chk.tail.next.Load())), humanize.Comma(int64(r.tailW.written.Load())))
	}
	if r.mq != nil {
		fmt.Fprintf(&b, "; mqtt %s received, %d restarts", humanize.Comma(int64(r.chk.mqtt.received.Load())), r.mq.restarts.Load())
	}
	return b.String()
}
