package run

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/report"
)

// RunnerIPerf3 names the reference row of `run --iperf3`: iperf3's own
// server and client on loopback, one stream, pinned like the engine and
// the generator, so that the "fraction of iperf3" ratio comes from the
// same run as the runners.
const RunnerIPerf3 = "iperf3"

// iperf3Result is the part of `iperf3 -c ... -J` output the reference
// row uses.
type iperf3Result struct {
	End struct {
		SumReceived struct {
			Bytes         float64 `json:"bytes"`
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		CPU struct {
			RemoteTotal float64 `json:"remote_total"` // the server's CPU, percent of one CPU
			HostTotal   float64 `json:"host_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
	Error string `json:"error"`
}

// parseIPerf3 turns a client's JSON report into a reference Result: the
// bytes the server received, its throughput, and the server's CPU time
// (iperf3's percentage of the run) per GiB.
func parseIPerf3(b []byte) (*bench.Result, error) {
	var ir iperf3Result
	if err := json.Unmarshal(b, &ir); err != nil {
		return nil, fmt.Errorf("bench: iperf3: bad report: %w", err)
	}
	if ir.Error != "" {
		return nil, fmt.Errorf("bench: iperf3: %s", ir.Error)
	}
	s := ir.End.SumReceived
	if s.Seconds <= 0 || s.Bytes <= 0 {
		return nil, errors.New("bench: iperf3: the report has no received bytes")
	}
	r := &bench.Result{Runner: RunnerIPerf3, Sources: 1, Bytes: uint64(s.Bytes), DurationS: s.Seconds,
		ThroughputBps: s.Bytes / s.Seconds, CPUS: ir.End.CPU.RemoteTotal / 100 * s.Seconds, Verified: true,
		GenHeld: 1, GenCPUUtil: ir.End.CPU.HostTotal / 100, EngineCPUUtil: ir.End.CPU.RemoteTotal / 100,
		Hist: report.NewHist(), E2E: report.NewHist()}
	r.CPUSPerGiB = bench.CPUPerGiB(r.CPUS, r.Bytes)
	r.Bottleneck = bench.Bottleneck(r.EngineCPUUtil, r.GenCPUUtil)
	return r, nil
}

// measureIPerf3 runs one iperf3 server (in this process's CPUs, the
// engine's) and one client pinned to the generator's first CPU for d.
func measureIPerf3(ctx context.Context, d time.Duration, genCPUs []int, round int) (*bench.Result, error) {
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		return nil, errors.New("bench: --iperf3: iperf3 is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: iperf3: %w", err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-s", "-1", "--forceflush", "-B", "127.0.0.1", "-p", port)
	out, err := srv.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: iperf3: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("bench: iperf3: %w", err)
	}
	defer srv.Wait()
	defer cancel()
	sc := bufio.NewScanner(out)
	ready := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "listening") {
			ready = true
			break
		}
	}
	if !ready {
		return nil, errors.New("bench: iperf3: the server did not start")
	}
	go func() {
		for sc.Scan() { // drain, so the server never blocks on its output
		}
	}()
	// 1 MiB writes, as the generator's unpaced sources make: with its
	// default 128 KiB, iperf3 measures its own write calls, not loopback.
	args := []string{"-c", "127.0.0.1", "-p", port, "-l", "1M", "-t", strconv.FormatFloat(max(d.Seconds(), 1), 'f', 0, 64), "-J"}
	if len(genCPUs) > 0 {
		args = append(args, "-A", strconv.Itoa(genCPUs[0]))
	}
	b, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil && len(b) == 0 {
		return nil, fmt.Errorf("bench: iperf3 client: %w", err)
	}
	r, err := parseIPerf3(b)
	if err != nil {
		return nil, err
	}
	r.Round = round
	return r, nil
}
