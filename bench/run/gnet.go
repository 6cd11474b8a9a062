package run

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/sink"
)

// peerArgs are the reference sink's flags for the row w measures: gnet's
// event loops, or Go's net package, behind TLS when w has the run's
// certificate.
func peerArgs(w bench.Workload) []string {
	args := peers.Args(w.Runner)
	if w.TLS != nil {
		args = append(args, "-tls-cert", w.TLS.CertFile, "-tls-key", w.TLS.KeyFile)
	}
	return args
}

// sinkStreams turns a sink report's streams into the collector's records,
// for reconcile.
func sinkStreams(ss []sink.SinkStream) []*bench.Stream {
	out := make([]*bench.Stream, len(ss))
	for i, s := range ss {
		crc, _ := strconv.ParseUint(s.CRC32C, 16, 32)
		out[i] = &bench.Stream{Name: s.Peer, Bytes: s.Bytes, CRC: uint32(crc), Records: s.Records,
			Truncated: s.TruncatedBytes, Skipped: s.RecordsSkipped}
		out[i].Errors.Store(s.Errors)
	}
	return out
}

// measureGnet runs one workload of the built-in generator against a
// reference sink (w.Runner is peers.Gnet or peers.Go, with w.TLS for
// peers.GoTLS), measured as measure measures the engine: from the word to
// send until the last connection closed, CPU time of the sink process.
func measureGnet(ctx context.Context, w bench.Workload, bin string, ios harness.IO) (*bench.Result, error) {
	framer, err := w.Engine.Framer()
	if err != nil {
		return nil, err
	}
	p, err := peers.StartGnet(ctx, bin, w.Wire, w.Sources, harness.FramingName(framer), w.Verify, peerArgs(w), ios)
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	g, err := bench.StartGen(ctx, w, p.Addr, framer, ios)
	if err != nil {
		return nil, err
	}
	defer g.Kill()
	var st peers.Event
	for deadline := time.Now().Add(bench.DialLimit(w.Sources)); ; time.Sleep(5 * time.Millisecond) {
		if err := p.Ask(ctx, "stats", "stats", &st); err != nil {
			return nil, err
		}
		if st.Open >= int64(w.Sources) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: %s: only %d of %d connections accepted", w.Row(), st.Open, w.Sources)
		}
	}
	var mark peers.Event
	if err := p.Ask(ctx, "mark", "marked", &mark); err != nil {
		return nil, err
	}
	core0, coreOK := harness.ReadCores(w.Wire.SinkCPUs, w.Wire.LoadCPUs)
	t0 := time.Now()
	if err := g.Send(); err != nil {
		return nil, err
	}
	// The sink's sockets are in its own network namespace on the wire.
	backlog := harness.SampleBacklog(p.Addr, w.Duration, p.Cmd.Process.Pid)
	var core1 harness.CoreSample
	var rep load.GenReport
	var ended *peers.Event
	got := false
	endLimit := time.After(w.Duration + 60*time.Second)
	pending := g.Lines
	for ended == nil || !got {
		select {
		case l, ok := <-pending:
			if !ok {
				pending = nil
				if !got {
					backlog.Finish()
					return nil, errors.New("bench: generator exited without a report")
				}
				continue
			}
			got = true
			if rep, err = bench.DecodeGenReport(l); err != nil {
				backlog.Finish()
				return nil, err
			}
		case ev := <-p.Ended:
			ended = &ev
			c1, ok := harness.ReadCores(w.Wire.SinkCPUs, w.Wire.LoadCPUs)
			core1, coreOK = c1, coreOK && ok
		case <-endLimit:
			backlog.Finish()
			return nil, fmt.Errorf("bench: %s: connections still open %v after the generator's duration", w.Row(), 60*time.Second)
		case <-ctx.Done():
			backlog.Finish()
			return nil, ctx.Err()
		}
	}
	rxBacklog := backlog.Finish()
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var sr sink.SinkReport
	if err := p.Ask(ctx, "stop", "report", &sr); err != nil {
		return nil, err
	}
	if err := p.Wait(); err != nil {
		return nil, err
	}
	r := &bench.Result{Runner: w.Row(), Round: w.Round, Sources: w.Sources, Bytes: sr.Bytes,
		DurationS: time.Duration(ended.UnixNs - t0.UnixNano()).Seconds(), CPUS: time.Duration(ended.CPUNs).Seconds(),
		ThreadsMax: sr.ThreadsMax, RSSMaxBytes: sr.RSSMaxBytes, Errors: sr.Errors,
		EngineCPUs: runtime.GOMAXPROCS(0), RxBacklogBytes: rxBacklog, Hist: report.NewHist(), E2E: report.NewHist()}
	bench.ApplyGen(r, rep)
	r.Wire = w.Wire.Name()
	if coreOK {
		bench.ApplyCore(r, harness.CoreBetween(core0, core1), r.Bytes, len(w.Wire.SinkCPUs), len(w.Wire.LoadCPUs))
	}
	if r.DurationS > 0 {
		r.ThroughputBps = float64(r.Bytes) / r.DurationS
		r.EngineCPUUtil = r.CPUS / (r.DurationS * float64(r.EngineCPUs))
	}
	if rep.OfferedBps == 0 {
		r.Bottleneck = r.NameBottleneck()
	}
	r.CPUSPerGiB = bench.CPUPerGiB(r.CPUS, r.Bytes)
	recSize := 0
	if framer != nil {
		recSize = int(w.MsgSize)
	}
	streams := sinkStreams(sr.Streams)
	r.PerSource, r.Weights, r.Mismatches = bench.Reconcile(streams, rep.Streams, w.Verify, recSize)
	r.StreamsVerified = bench.StreamsVerified(streams, rep.Streams, w.Verify)
	for _, s := range streams {
		r.Records += s.Records
		r.TruncatedBytes += s.Truncated
	}
	if r.DurationS > 0 {
		r.RecordsPerS = float64(r.Records) / r.DurationS
	}
	r.FairnessJain = bench.WeightedJain(r.PerSource, r.Weights)
	r.Verified = len(r.Mismatches) == 0
	return r, nil
}
