package idle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
)

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
