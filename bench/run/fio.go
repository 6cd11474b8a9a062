package run

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/sink"
)

// reconcileFio lists every way what the sink received differs from what
// fio reports it sent: per connection (sorted, since fio's jobs do not
// name their ports), the bytes fio wrote plus its trailer; the number of
// connections; errors; and with newline records of recSize bytes, each
// connection's records and the bytes after its last line (its trailer and
// any line cut short when the time ran out).
func reconcileFio(sink *sink.SinkReport, fio *load.FioReport, sources, recSize int) []string {
	var out []string
	for _, j := range fio.Jobs {
		if j.Error != 0 {
			out = append(out, fmt.Sprintf("fio job %s: error %d", j.Name, j.Error))
		}
	}
	if len(fio.Jobs) != sources || sink.Sources != sources {
		out = append(out, fmt.Sprintf("%d sources asked for, fio ran %d jobs, the sink saw %d connections", sources, len(fio.Jobs), sink.Sources))
	}
	want := fio.Sent() + load.FioTrailer*uint64(len(fio.Jobs))
	if sink.Bytes != want {
		out = append(out, fmt.Sprintf("fio wrote %d bytes on %d connections (%d with their %d-byte trailers), the sink read %d",
			fio.Sent(), len(fio.Jobs), want, load.FioTrailer, sink.Bytes))
	}
	sent := make([]uint64, len(fio.Jobs))
	for i, j := range fio.Jobs {
		sent[i] = j.Write.IOBytes + load.FioTrailer
	}
	got := make([]uint64, len(sink.Streams))
	for i, s := range sink.Streams {
		got[i] = s.Bytes
	}
	slices.Sort(sent)
	slices.Sort(got)
	if len(sent) == len(got) && !slices.Equal(sent, got) {
		bad := 0
		var eg []string
		for i := range sent {
			if sent[i] != got[i] {
				bad++
				if len(eg) < 3 {
					eg = append(eg, fmt.Sprintf("%d against %d", got[i], sent[i]))
				}
			}
		}
		out = append(out, fmt.Sprintf("%d connections' byte counts differ from fio's jobs' (both sorted, trailers counted): e.g. %s",
			bad, strings.Join(eg, ", ")))
	}
	if sink.Errors > 0 {
		out = append(out, fmt.Sprintf("the sink reported %d source errors: %s", sink.Errors, strings.Join(sink.ErrorSamples, "; ")))
	}
	if recSize > 0 {
		var recs, wantRecs uint64
		for _, j := range fio.Jobs {
			wantRecs += j.Write.IOBytes / uint64(recSize)
		}
		bad := 0
		for _, s := range sink.Streams {
			recs += s.Records
			body := s.Bytes - min(s.Bytes, load.FioTrailer)
			if s.Records != body/uint64(recSize) || s.TruncatedBytes != body%uint64(recSize)+load.FioTrailer || s.RecordsSkipped > 0 {
				bad++
				if bad == 1 {
					out = append(out, fmt.Sprintf("%s: %d bytes hold %d lines of %d bytes and %d bytes after the last, the sink counted %d lines, %d bytes after, %d skipped",
						s.Peer, s.Bytes, body/uint64(recSize), recSize, body%uint64(recSize)+load.FioTrailer, s.Records, s.TruncatedBytes, s.RecordsSkipped))
				}
			}
		}
		if bad > 1 {
			out = append(out, fmt.Sprintf("and %d more connections whose lines do not add up", bad-1))
		}
		if recs != wantRecs {
			out = append(out, fmt.Sprintf("fio wrote %d whole lines, the sink counted %d", wantRecs, recs))
		}
	}
	return out
}

// sinkProc is a sink process fed by fio: `sluice-bench sink` or the gnet
// sink, stopping once idle and writing its report to a file.
type sinkProc struct {
	cmd    *exec.Cmd
	done   chan error // its exit
	addr   string
	stderr *harness.TailBuffer
}

// listeningRE finds the address in a sink's "listening on ADDR" line.
var listeningRE = regexp.MustCompile(`listening on ([^ ,]+)`)

// startSinkProc starts bin with args on the sink's side of wire
// (inheriting this process's CPUs, the engine's) and waits until it says
// where it listens.
func startSinkProc(ctx context.Context, wire harness.WireEnv, bin string, args []string) (*sinkProc, error) {
	cmd := wire.Command(ctx, harness.SideSink, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = bench.ShutdownTimeout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: sink: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start sink %s: %w", bin, err)
	}
	p := &sinkProc{cmd: cmd, done: make(chan error, 1), stderr: &harness.TailBuffer{Max: 64 << 10}}
	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l := sc.Text()
			p.stderr.Add(l)
			if m := listeningRE.FindStringSubmatch(l); m != nil {
				select {
				case addrs <- m[1]:
				default:
				}
			}
		}
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-addrs:
		return p, nil
	case err := <-p.done:
		return nil, fmt.Errorf("bench: the sink exited before listening (%v):\n%s", err, p.stderr)
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, fmt.Errorf("bench: the sink did not listen in 30s:\n%s", p.stderr)
	}
}

// wait waits for the sink to stop by itself, for at most d; then it is
// interrupted.
func (p *sinkProc) wait(d time.Duration) error {
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("bench: sink: %w:\n%s", err, p.stderr)
		}
		return nil
	case <-time.After(d):
		p.stop()
		return fmt.Errorf("bench: the sink did not stop %v after fio:\n%s", d, p.stderr)
	}
}

// stop interrupts the sink and waits for it.
func (p *sinkProc) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(bench.ShutdownTimeout):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// quietProc is the quiet source (`sluice-bench quiet`) on the load's
// side of the wire.
type quietProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout bytes.Buffer
	stderr bytes.Buffer
	waited bool
}

// startQuiet starts the quiet source against the sink at addr, on the
// load's CPUs, sending a line every every until finish.
func startQuiet(ctx context.Context, env fioEnv, addr string, every time.Duration) (*quietProc, error) {
	q := &quietProc{}
	q.cmd = env.wire.Command(ctx, harness.SideLoad, env.exe, "quiet", "--addr", addr, "--every", every.String())
	q.cmd.Stdout, q.cmd.Stderr = &q.stdout, &q.stderr
	var err error
	if q.stdin, err = q.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("bench: quiet source: %w", err)
	}
	if err := harness.StartOnCPUs(q.cmd, env.cpus); err != nil {
		return nil, fmt.Errorf("bench: start the quiet source: %w", err)
	}
	return q, nil
}

// finish tells the quiet source to stop, waits for it, and returns what
// it sent.
func (q *quietProc) finish() (load.QuietSent, error) {
	var sent load.QuietSent
	q.stdin.Close()
	q.waited = true
	if err := q.cmd.Wait(); err != nil {
		return sent, fmt.Errorf("bench: quiet source: %w\n%s", err, q.stderr.Bytes())
	}
	if err := json.Unmarshal(q.stdout.Bytes(), &sent); err != nil {
		return sent, fmt.Errorf("bench: quiet source's report %q: %w", q.stdout.Bytes(), err)
	}
	return sent, nil
}

// kill ends the quiet source if finish has not.
func (q *quietProc) kill() {
	if q.waited {
		return
	}
	q.waited = true
	q.stdin.Close()
	q.cmd.Process.Kill()
	q.cmd.Wait()
}

// fioEnv is what every fio row of a run shares.
type fioEnv struct {
	fio      string // the fio binary
	exe      string // sluice-bench, for `sink`
	gnetSink string // the reference sinks' binary, with --peers
	cpus     []int  // fio's CPUs
	sinkCPUs int    // how many CPUs the sinks may use
	wire     harness.WireEnv
}

// measureFio measures one row (a runner's sink, or the gnet sink) under
// fio: the sink listens in a process of its own on this process's CPUs,
// fio runs on the client's, and the row's figures are the sink's own
// report (CPU time over the time it listened, throughput from its first
// byte to its last) reconciled with fio's.
func measureFio(ctx context.Context, c RunConfig, env fioEnv, row string, round int, ios harness.IO) (*bench.Result, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-fio-")
	if err != nil {
		return nil, fmt.Errorf("bench: fio: %w", err)
	}
	defer os.RemoveAll(dir)
	framer, _ := c.Engine.Framer()
	recSize := 0
	if framer != nil {
		recSize = c.recordSize()
	}
	sinkJSON := filepath.Join(dir, "sink.json")
	profile := ""
	if c.Profile != "" {
		profile = filepath.Join(c.Profile, fmt.Sprintf("cpu-fio-%s-r%d.pprof", row, round))
		if err := os.MkdirAll(c.Profile, 0o755); err != nil {
			return nil, fmt.Errorf("bench: --profile: %w", err)
		}
	}
	var bin string
	var args []string
	if peers.IsRow(row) {
		bin = env.gnetSink
		args = append([]string{"-listen", env.wire.ListenAddr(), "-until-idle", load.FioSinkIdle.String(), "-json", sinkJSON,
			"-framing", harness.FramingName(framer)}, peerArgs(bench.Workload{Runner: row})...)
		if profile != "" {
			args = append(args, "-cpuprofile", profile)
		}
	} else {
		bin = env.exe
		args = append([]string{"sink", "--listen", env.wire.ListenAddr(), "--runner", row, "--until-idle", load.FioSinkIdle.String(),
			"--json", sinkJSON}, c.Engine.Args()...)
		if profile != "" {
			args = append(args, "--profile", profile)
		}
	}
	cores := harness.StartCoreSampler(env.wire.SinkCPUs, env.wire.LoadCPUs)
	defer cores.Finish()
	sp, err := startSinkProc(ctx, env.wire, bin, args)
	if err != nil {
		return nil, err
	}
	var qp *quietProc
	if c.QuietSource > 0 {
		if qp, err = startQuiet(ctx, env, sp.addr, c.QuietSource); err != nil {
			sp.stop()
			return nil, err
		}
		defer qp.kill()
	}
	job := load.FioJob{Addr: sp.addr, Sources: c.Sources, Duration: c.Duration, BS: int(c.MsgSize), Rate: float64(c.Rate),
		Arrivals: c.Arrivals, RecordSize: recSize, NoDelay: true, CPUs: env.cpus}
	jobFile := filepath.Join(dir, "job.fio")
	fioJSON := filepath.Join(dir, "fio.json")
	if err := os.WriteFile(jobFile, []byte(job.File()), 0o644); err != nil {
		sp.stop()
		return nil, fmt.Errorf("bench: fio: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, c.Duration+2*time.Minute)
	defer cancel()
	cmd := env.wire.Command(fctx, harness.SideLoad, env.fio, "--output-format=json", "--output="+fioJSON, jobFile)
	var fioErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &fioErr, &fioErr
	if err := harness.StartOnCPUs(cmd, env.cpus); err != nil {
		sp.stop()
		return nil, fmt.Errorf("bench: start fio: %w", err)
	}
	fioStart := time.Now()
	runErr := cmd.Wait()
	fioWall := time.Since(fioStart).Seconds()
	if runErr != nil {
		sp.stop()
		return nil, fmt.Errorf("bench: fio: %w\n%s", runErr, fioErr.Bytes())
	}
	fioCPU := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	var quietSent load.QuietSent
	if qp != nil {
		// The load is done: the quiet source closes, and with it the
		// sink's last connection.
		if quietSent, err = qp.finish(); err != nil {
			sp.stop()
			return nil, err
		}
	}
	if err := sp.wait(30 * time.Second); err != nil {
		return nil, err
	}
	coreSamples := cores.Finish()
	b, err := os.ReadFile(fioJSON)
	if err != nil {
		return nil, fmt.Errorf("bench: fio: %w", err)
	}
	fr, err := load.ParseFioNet(b)
	if err != nil {
		return nil, err
	}
	if b, err = os.ReadFile(sinkJSON); err != nil {
		return nil, fmt.Errorf("bench: sink report: %w", err)
	}
	var sr sink.SinkReport
	if err := json.Unmarshal(b, &sr); err != nil {
		return nil, fmt.Errorf("bench: sink report: %w", err)
	}
	r := fioResult(row, round, c, &sr, fr, fioCPU, fioWall, env.sinkCPUs, len(env.cpus))
	r.Wire = env.wire.Name()
	if u, ok := harness.CoreOver(coreSamples, r.CPUWin[0], r.CPUWin[1]); ok {
		bench.ApplyCore(r, u, r.CPUWinBytes, len(env.wire.SinkCPUs), len(env.wire.LoadCPUs))
		if r.Bottleneck != "" {
			r.Bottleneck = r.NameBottleneck()
		}
	}
	r.Mismatches = reconcileFio(&sr, fr, c.Sources, recSize)
	if qp != nil {
		r.QuietHist = sr.Quiet.Hist()
		r.Quiet = &load.QuietSummary{Sent: quietSent.Lines, LatencyNs: report.Summarize(r.QuietHist)}
		if sr.Quiet != nil {
			r.Quiet.Lines, r.Quiet.BadLines = sr.Quiet.Lines, sr.Quiet.BadLines
		}
		if m := load.QuietMismatch(quietSent.Lines, sr.Quiet); m != "" {
			r.Mismatches = append(r.Mismatches, m)
		}
	}
	r.Verified = len(r.Mismatches) == 0
	if profile != "" {
		r.Profile = profile
		if r.TopFunctions, err = report.TopFunctions(profile, 10); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// fioResult is a row's Result from the sink's report and fio's, with
// fio's CPU time and wall time as this process saw them.
func fioResult(row string, round int, c RunConfig, sr *sink.SinkReport, fr *load.FioReport, fioCPU, fioWall float64, sinkCPUs, clientCPUs int) *bench.Result {
	r := &bench.Result{Runner: row, Round: round, Sources: sr.Sources, Bytes: sr.Bytes, DurationS: sr.DurationS,
		ThroughputBps: sr.ThroughputBps, CPUS: sr.CPUS, CPUSPerGiB: sr.CPUSPerGiB, ThreadsMax: sr.ThreadsMax,
		RSSMaxBytes: sr.RSSMaxBytes, Records: sr.Records, RecordsPerS: sr.RecordsPerS, RecordsSkipped: sr.Skipped,
		TruncatedBytes: sr.Truncated, PoolWaits: sr.PoolWaits, PartialFlushes: sr.Partials, Errors: sr.Errors,
		GenSentBytes: fr.Sent() + load.FioTrailer*uint64(len(fr.Jobs)), GenCPUS: fioCPU,
		GenHeld: 1, EngineCPUs: max(sinkCPUs, 1), GenCPUs: max(clientCPUs, 1), Counters: sr.Counters,
		Hist: report.NewHist(), E2E: report.NewHist()}
	if sr.DurationS > 0 {
		// The sink's CPU time covers the whole time it listened; its
		// utilisation is judged over the time bytes flowed.
		r.EngineCPUUtil = sr.CPUS / (sr.DurationS * float64(r.EngineCPUs))
	}
	// fio starts its jobs one by one and, with a CPU busy writing, lets
	// some run past the runtime, which stretches the time from the first
	// byte to the last: the steady interval, while every connection sent,
	// is what the sink could take, and failing that the time most of them
	// were sending.
	r.ThroughputOver = bench.ThroughputFirstToLast
	var a, b int64
	if sr.SteadyS >= max(0.5, sr.DurationS/4) {
		r.ThroughputBps, r.ThroughputOver = sr.SteadyBps, bench.ThroughputAllSending
		a, b = sendingWindow(sr.Streams, 1)
	} else if bps, secs := concurrentThroughput(sr.Streams, 0.9); secs >= max(0.5, sr.DurationS/4) {
		r.ThroughputBps, r.ThroughputOver = bps, bench.ThroughputMostSending
		a, b = sendingWindow(sr.Streams, 0.9)
	}
	// The CPU per GiB over the same interval, from the sink's usage
	// samples: the ramp while fio starts its jobs, and the tail while the
	// last ones finish, cost the sink CPU for few bytes and by varying
	// amounts from round to round.
	r.CPUSPerGiBListened, r.CPUOver = r.CPUSPerGiB, bench.CPUOverListened
	if us := sr.Usage; len(us) >= 2 {
		r.CPUWin, r.CPUWinBytes = [2]int64{us[0].UnixNs, us[len(us)-1].UnixNs}, sr.Bytes
	}
	if cpu, n, ok := harness.UsageOver(sr.Usage, a, b); ok && n > 0 {
		r.CPUWin, r.CPUWinBytes = [2]int64{a, b}, n
		r.CPUSPerGiB, r.CPUOver = bench.CPUPerGiB(cpu.Seconds(), n), r.ThroughputOver
		r.EngineCPUUtil = cpu.Seconds() / (time.Duration(b-a).Seconds() * float64(r.EngineCPUs))
	}
	xs := make([]float64, len(sr.Streams))
	for i, s := range sr.Streams {
		xs[i] = float64(s.Bytes)
	}
	r.FairnessJain = report.JainIndex(xs)
	if fioWall > 0 {
		r.GenCPUUtil = fioCPU / (fioWall * float64(r.GenCPUs))
	}
	if c.Rate > 0 {
		// What fio was asked for over the time its jobs ran, against what
		// it wrote: fio paces each job on its own, and a client that
		// cannot keep up writes less, rather than late.
		r.OfferedBps = float64(c.Rate) * float64(c.Sources)
		var offered float64
		for _, j := range fr.Jobs {
			offered += float64(c.Rate) * float64(j.JobRuntime) / 1e3
		}
		if offered > 0 {
			r.GenHeld = float64(fr.Sent()) / offered
		}
		if r.GenHeld < bench.MinHeld {
			r.GeneratorBound = true
			r.GenBoundWhy = fmt.Sprintf("fio sent %.1f%% of the offered load (< %.0f%%)", 100*r.GenHeld, 100*bench.MinHeld)
		}
	} else {
		r.Bottleneck = r.NameBottleneck()
	}
	return r
}

// concurrentThroughput estimates the bytes per second received over the
// interval when at least a fraction share of the streams were sending:
// from the moment that many had sent their first byte to the moment all
// but that many were still sending, each stream's bytes in it taken at
// its mean rate. It returns 0s when there is no such interval.
func concurrentThroughput(ss []sink.SinkStream, share float64) (bps, seconds float64) {
	a, b := sendingWindow(ss, share)
	if b <= a {
		return 0, 0
	}
	var bytes float64
	for _, s := range ss {
		if s.Bytes == 0 || s.LastNs <= s.FirstNs {
			continue
		}
		if lo, hi := max(a, s.FirstNs), min(b, s.LastNs); hi > lo {
			bytes += float64(s.Bytes) * float64(hi-lo) / float64(s.LastNs-s.FirstNs)
		}
	}
	seconds = time.Duration(b - a).Seconds()
	return bytes / seconds, seconds
}

// sendingWindow returns the interval (UnixNano) when at least a fraction
// share of the streams were sending (see concurrentThroughput): from the
// moment that many had sent their first byte to the moment all but that
// many were still sending. b <= a when there is none.
func sendingWindow(ss []sink.SinkStream, share float64) (a, b int64) {
	var firsts, lasts []int64
	for _, s := range ss {
		if s.Bytes > 0 && s.LastNs > s.FirstNs {
			firsts, lasts = append(firsts, s.FirstNs), append(lasts, s.LastNs)
		}
	}
	if len(firsts) == 0 {
		return 0, 0
	}
	slices.Sort(firsts)
	slices.Sort(lasts)
	k := min(len(firsts)-1, int(share*float64(len(firsts))))
	if share >= 1 {
		k = len(firsts) - 1
	}
	return firsts[k], lasts[len(lasts)-1-k]
}
