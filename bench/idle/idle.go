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
	"fmt"
	"runtime"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
)

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
