package idle

// The descriptor plan of `idle`: which levels each runner's sink can
// reach under the hard RLIMIT_NOFILE, what soft limit it sets, and how
// many client processes hold the idle connections. Everything here is
// arithmetic on the limits; Idle applies it before starting anything.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/engine"
)

const (
	// idleMaxClients bounds the idle client processes of one runner.
	idleMaxClients = 64
	// idleNoFileCap bounds the limits the plan counts with: an
	// unlimited hard limit (RLIM_INFINITY) is not a count.
	idleNoFileCap = 1 << 30
	// idleMaxWorkers is the engine's most workers (engine.Config.Workers).
	idleMaxWorkers = 1024
)

// idleRunnerPlan is one runner's part of the plan.
type idleRunnerPlan struct {
	Runner  string
	Workers int // the sink's event-loop workers
	// Slots is each uring worker's registered file table, in
	// connections; 0 for the other runners, or with --file-slots -1.
	Slots int
	// Levels are the idle levels measured: --idle, or fewer and a lower
	// top one when the sink could not reach them (Capped says why).
	Levels []int
	Capped string
	// Need is the descriptors the sink needs at the top level, and
	// Soft the soft RLIMIT_NOFILE it sets: Need, or the hard limit under
	// uring, whose tables follow the soft limit.
	Need uint64
	Soft uint64
	// Clients is how many idle client processes hold the connections,
	// PerClient the most any of them holds.
	Clients   int
	PerClient int
}

func (p idleRunnerPlan) String() string {
	clients := fmt.Sprintf("1 idle client of %s connections", humanize.Comma(int64(p.PerClient)))
	if p.Clients > 1 {
		clients = fmt.Sprintf("%d idle clients of up to %s connections each", p.Clients, humanize.Comma(int64(p.PerClient)))
	}
	s := fmt.Sprintf("%s: levels %s; the sink%s needs %s descriptors at the top, %s",
		p.Runner, commaList(p.Levels), idleSinkShape(p.Runner, p.Workers, p.Slots), humanize.Comma(int64(p.Need)), clients)
	if p.Capped != "" {
		s += "; " + p.Capped
	}
	return s
}

// idleSinkShape says how a sink runs, in parentheses after a space: the
// workers of uring and epoll, and uring's file tables; "" for the other
// runners.
func idleSinkShape(runner string, workers, slots int) string {
	if runner != engine.RunnerURing && runner != engine.RunnerEpoll {
		return ""
	}
	s := plural(workers, "worker")
	if slots > 0 {
		s += fmt.Sprintf(" with file tables of %s slots", humanize.Comma(int64(slots)))
	}
	return " (" + s + ")"
}

// top is the plan's highest level.
func (p idleRunnerPlan) top() int { return p.Levels[len(p.Levels)-1] }

// idleTableSlots is the size of each uring worker's file table in a
// sink whose soft RLIMIT_NOFILE is soft, as the engine sizes it: the
// --file-slots value when given (the kernel caps a table at the soft
// limit), none when it is negative, else the soft limit, at most
// engine.DefaultMaxFileSlots.
func idleTableSlots(flag int, soft uint64) int {
	s := int(min(soft, idleNoFileCap))
	switch {
	case flag < 0:
		return 0
	case flag > 0:
		return min(flag, s)
	}
	return min(s, engine.DefaultMaxFileSlots)
}

// idleSinkNeed is the descriptors a sink needs to hold conns connections,
// idle and active: under uring the margin and the connections its
// workers' tables do not hold; under the other runners one per
// connection and the margin.
func idleSinkNeed(runner string, conns, workers, slots int) uint64 {
	if runner == engine.RunnerURing {
		return uint64(idleFDMargin + max(0, conns-workers*slots))
	}
	return uint64(idleFDMargin + conns)
}

// idleSinkMost is the most connections, idle and active, a sink can hold
// under the hard limit: the inverse of idleSinkNeed.
func idleSinkMost(runner string, workers, slots int, hard uint64) int {
	n := int(min(hard, idleNoFileCap)) - idleFDMargin
	if runner == engine.RunnerURing {
		n += workers * slots
	}
	return max(0, n)
}

// idleURingWorkers is the fewest uring workers whose tables of slots
// each, with the descriptors the hard limit leaves beside them, hold
// conns connections; 0 when no count up to the engine's most would.
func idleURingWorkers(conns, slots int, hard uint64) int {
	if slots < 1 {
		return 0
	}
	rest := conns - (int(min(hard, idleNoFileCap)) - idleFDMargin)
	n := max(1, (rest+slots-1)/slots)
	if n > idleMaxWorkers {
		return 0
	}
	return n
}

// idleCapLevel rounds the most idle connections a sink can hold down to a
// level worth printing: whole thousands from 2,000 up.
func idleCapLevel(most int) int {
	if most >= 2000 {
		return most - most%1000
	}
	return most
}

// idleClientConns is the most idle connections one client process holds:
// --client-conns, or what the hard limit leaves after the margin.
func (c IdleConfig) idleClientConns(hard uint64) (int, error) {
	room := int(min(hard, idleNoFileCap)) - idleFDMargin
	switch {
	case c.ClientConns > 0 && c.ClientConns > room:
		return 0, fmt.Errorf("--client-conns %d: a process may hold %s descriptors (the hard RLIMIT_NOFILE), room for %s connections beside its %d others",
			c.ClientConns, humanize.Comma(int64(hard)), humanize.Comma(int64(max(room, 0))), idleFDMargin)
	case c.ClientConns > 0:
		return c.ClientConns, nil
	case room < 1:
		return 0, fmt.Errorf("the hard RLIMIT_NOFILE of %d leaves an idle client no descriptor for a connection; raise it (ulimit -Hn, as root)", hard)
	}
	return room, nil
}

// idleClientProcs is how many client processes hold conns connections,
// per at most each.
func idleClientProcs(conns, per int) int { return max(1, (conns+per-1)/per) }

// idleShare is how many of n connections client i of procs holds: client
// i holds connections i, i+procs, i+2*procs... of the plan, so that
// together they hold connections 0 to n-1, whichever n, as one client
// would.
func idleShare(n, i, procs int) int {
	if n <= i {
		return 0
	}
	return (n - i + procs - 1) / procs
}

// idlePair is the (source, listener) pair of the plan's connection g:
// round robin over the pairs, so that no pair carries more than
// perPair connections whichever client opens it.
func idlePair(g, sources, listeners int) (src, dst int) {
	p := g % (sources * listeners)
	return p / listeners, p % listeners
}

// plan works out runner's part: its levels, its sink's limit and its
// clients, under the hard limit, for a sink of workers workers whose
// client processes hold at most perClient connections each. When the
// sink cannot hold the top --idle level, the levels are capped
// (CapLevels: those it cannot reach are left out and the highest it
// can is measured instead), or plan fails, saying what would fit; it
// fails too, with CapLevels, when not even the first level fits.
func (c IdleConfig) plan(runner string, workers int, hard uint64, perClient int) (idleRunnerPlan, error) {
	hard = min(hard, idleNoFileCap)
	p := idleRunnerPlan{Runner: runner, Workers: workers}
	if runner == engine.RunnerURing {
		p.Slots = idleTableSlots(c.Engine.FileSlots, hard)
	}
	most := idleSinkMost(runner, workers, p.Slots, hard) - c.Active
	top := c.Idle[len(c.Idle)-1]
	if top <= most {
		p.Levels = slices.Clone([]int(c.Idle))
	} else {
		if !c.CapLevels || c.Idle[0] > most {
			return p, errors.New(c.tooMany(p, top, hard, most, true))
		}
		// The levels measured instead are the fix this run takes.
		why := c.tooMany(p, top, hard, most, false)
		p.Levels = idleFitLevels(c.Idle, most)
		p.Capped = fmt.Sprintf("measured up to %s idle: %s", humanize.Comma(int64(p.top())), why)
	}
	p.Need = idleSinkNeed(runner, p.top()+c.Active, workers, p.Slots)
	p.Soft = p.Need
	if runner == engine.RunnerURing {
		p.Soft = max(p.Need, hard)
	}
	p.Clients = idleClientProcs(p.top(), perClient)
	p.PerClient = idleShare(p.top(), 0, p.Clients)
	return p, nil
}

// tooMany says, in flags, why the sink of p cannot hold top idle
// connections beside the active ones, and what would: the levels that
// fit (with levels), uring workers enough, or a higher hard limit.
func (c IdleConfig) tooMany(p idleRunnerPlan, top int, hard uint64, most int, levels bool) string {
	conns := top + c.Active
	need := idleSinkNeed(p.Runner, conns, p.Workers, p.Slots)
	var b strings.Builder
	fmt.Fprintf(&b, "--idle %d needs %s descriptors for the %s runner", top, humanize.Comma(int64(need)), p.Runner)
	if p.Runner == engine.RunnerURing {
		switch {
		case p.Slots > 0 && p.Workers == 1:
			fmt.Fprintf(&b, " (%s beyond its worker's file table of %s slots)", humanize.Comma(int64(conns-p.Slots)), humanize.Comma(int64(p.Slots)))
		case p.Slots > 0:
			fmt.Fprintf(&b, " (%s beyond the file tables of its %d workers, %s slots each)", humanize.Comma(int64(conns-p.Workers*p.Slots)),
				p.Workers, humanize.Comma(int64(p.Slots)))
		default:
			b.WriteString(" (no file tables: --file-slots -1)")
		}
	}
	if c.Active > 0 {
		fmt.Fprintf(&b, " with --active %d", c.Active)
	}
	fmt.Fprintf(&b, " but the hard limit is %s", humanize.Comma(int64(hard)))
	var fixes []string
	if fit := idleFitLevels(c.Idle, most); levels && len(fit) > 0 {
		fixes = append(fixes, fmt.Sprintf("measure %s at --idle %s", p.Runner, harness.JoinInts(fit)))
	}
	slots, without := p.Slots, ""
	if p.Runner != engine.RunnerURing || slots == 0 {
		slots = idleTableSlots(0, hard)
		if c.Engine.FileSlots < 0 {
			without = "without --file-slots"
		}
	}
	switch w := idleURingWorkers(conns, slots, hard); {
	case w == 0:
	case w <= p.Workers:
		// This sink's workers would do under uring.
		fixes = append(fixes, strings.TrimSpace("run uring "+without))
	case without != "":
		fixes = append(fixes, fmt.Sprintf("run uring with --workers %d and %s", w, without))
	default:
		fixes = append(fixes, fmt.Sprintf("run uring with --workers %d", w))
	}
	if p.Runner == engine.RunnerURing {
		fixes = append(fixes, "raise the hard limit (ulimit -Hn, as root)")
	} else {
		fixes = append(fixes, fmt.Sprintf("raise the hard limit (as root: ulimit -Hn %d)", need))
	}
	b.WriteString("; ")
	b.WriteString(orList(fixes))
	return b.String()
}

// idleFitLevels is levels below most, with the highest level most allows
// after them: what a sink that holds most idle connections can measure.
func idleFitLevels(levels []int, most int) []int {
	var out []int
	for _, n := range levels {
		if n <= most {
			out = append(out, n)
		}
	}
	if cp := idleCapLevel(most); cp > 0 && (len(out) == 0 || cp > out[len(out)-1]) {
		out = append(out, cp)
	}
	return out
}

// plural writes n thing, or n things (n processes).
func plural(n int, thing string) string {
	switch {
	case n == 1:
		return "1 " + thing
	case strings.HasSuffix(thing, "s"):
		return strconv.Itoa(n) + " " + thing + "es"
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// orList joins a, b and c as "a, b, or c".
func orList(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	case 2:
		return s[0] + ", or " + s[1]
	}
	return strings.Join(s[:len(s)-1], ", ") + ", or " + s[len(s)-1]
}
