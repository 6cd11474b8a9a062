package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/srcs"
)

// genProc is the generator process of one measurement (the hidden `gen`
// subcommand), whatever sink it feeds: the engine, or a peer such as gnet.
type genProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	Lines  chan []byte // its stdout, a line at a time; closed at its end
	cancel context.CancelFunc
	waited bool
	err    error
}

// DialLimit bounds the connect phase of n sources.
func DialLimit(n int) time.Duration { return 30*time.Second + time.Duration(n)*time.Millisecond }

// StartGen starts the generator for w against addr, and returns once it
// has dialled every connection and waits for the word to send.
func StartGen(ctx context.Context, w Workload, addr string, framer srcs.Framer, ios harness.IO) (*genProc, error) {
	args := []string{"gen", "--addr", addr, "--sources", strconv.Itoa(w.Sources),
		"--duration", w.Duration.String(), "--msg-size", strconv.Itoa(int(w.MsgSize)),
		"--rate", strconv.FormatFloat(float64(w.Rate), 'f', 0, 64), "--arrivals", w.Arrivals,
		"--skew", strconv.FormatFloat(w.Skew, 'g', -1, 64), "--max-dial", strconv.Itoa(w.MaxDial),
		"--seed", strconv.Itoa(w.Round + 1), "--pacing", w.GenPacing(), "--wait"}
	if !w.Verify {
		args = append(args, "--no-crc")
	}
	if framer != nil {
		args = append(args, "--framing", framer.String())
	}
	if len(w.GenCPUs) > 0 {
		args = append(args, "--cpus", harness.JoinInts(w.GenCPUs))
	}
	if w.TLS != nil {
		args = append(args, "--tls-ca", w.TLS.CAFile)
	}
	gctx, cancel := context.WithCancel(ctx)
	cmd := w.Wire.Command(gctx, harness.SideLoad, w.Exe, args...)
	cmd.Stderr = ios.Err
	g := &genProc{cmd: cmd, cancel: cancel, Lines: make(chan []byte, 2)}
	var err error
	if g.stdin, err = cmd.StdinPipe(); err != nil {
		cancel()
		return nil, fmt.Errorf("bench: generator: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bench: generator: %w", err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("bench: start generator %s: %w", w.Exe, err)
	}
	go func() {
		defer close(g.Lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 256<<20)
		for sc.Scan() {
			g.Lines <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	// Connect phase: not measured.
	var ev load.GenEvent
	select {
	case l, ok := <-g.Lines:
		if !ok {
			return nil, fmt.Errorf("bench: generator exited before connecting: %v", g.Wait())
		}
		if err := json.Unmarshal(l, &ev); err != nil || ev.Event != "ready" {
			g.Kill()
			return nil, fmt.Errorf("bench: generator: unexpected output %q", l)
		}
	case <-time.After(DialLimit(w.Sources)):
		g.Kill()
		return nil, errors.New("bench: generator: connecting timed out")
	case <-ctx.Done():
		g.Kill()
		return nil, ctx.Err()
	}
	return g, nil
}

// Send tells the generator to start sending.
func (g *genProc) Send() error {
	if _, err := fmt.Fprintln(g.stdin, "go"); err != nil {
		return fmt.Errorf("bench: generator: %w", err)
	}
	return nil
}

// Wait closes the generator's input, drains its output and waits for it
// to exit. It may be called more than once.
func (g *genProc) Wait() error {
	if g.waited {
		return g.err
	}
	g.waited = true
	g.stdin.Close()
	for range g.Lines { // drain, so Wait can finish
	}
	if err := g.cmd.Wait(); err != nil {
		g.err = fmt.Errorf("bench: generator: %w", err)
	}
	g.cancel()
	return g.err
}

// Kill stops the generator and waits for it.
func (g *genProc) Kill() {
	g.cancel()
	g.Wait()
}

// DecodeGenReport reads the generator's final line.
func DecodeGenReport(l []byte) (load.GenReport, error) {
	var rep load.GenReport
	if err := json.Unmarshal(l, &rep); err != nil || rep.Event != "done" {
		return rep, fmt.Errorf("bench: generator: unexpected output %q", l)
	}
	return rep, nil
}

// ApplyGen fills r's generator fields from the generator's report.
func ApplyGen(r *Result, rep load.GenReport) {
	r.OfferedBps, r.GenSentBytes, r.GenCPUS, r.GenLagMaxNs = rep.OfferedBps, rep.SentBytes, rep.CPUS, rep.LagMaxNs
	r.GenLagNs, r.GenHeld, r.TLS = rep.LagNs, rep.HeldFraction(), rep.TLS
	r.GenCPUs, r.GenPreemptions, r.GenRunqueueWaitS = rep.CPUs, rep.Preemptions, rep.RunqueueWaitS
	if rep.ElapsedS > 0 && rep.CPUs > 0 {
		r.GenCPUUtil = rep.CPUS / (rep.ElapsedS * float64(rep.CPUs))
	}
	r.GeneratorBound, r.GenBoundWhy = GeneratorBound(rep.OfferedBps > 0, r.GenHeld, r.GenLagNs.P99)
}
