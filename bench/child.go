package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
)

// ChildCommand is the hidden subcommand that hosts one measurement's
// engine in a fresh process: `run` and `latency` start one per runner
// and round, so that one runner's threads, RSS and heap never inflate the
// next one's. The child inherits the parent's CPU affinity (the engine's
// CPUs), so its GOMAXPROCS follows; it starts the generator itself, and
// its getrusage covers the engine alone.
const ChildCommand = "measure-child"

// childReport is what the child writes to its stdout, as one JSON
// document: the measurement, with its latency histograms encoded.
type childReport struct {
	Result *Result                `json:"result"`
	Hist   *hdrhistogram.Snapshot `json:"hist,omitempty"`
	E2E    *hdrhistogram.Snapshot `json:"e2e,omitempty"`
	Error  string                 `json:"error,omitempty"`
}

// encodeChild writes the child's report for r, or for err.
func encodeChild(w io.Writer, r *Result, err error) error {
	rep := childReport{Result: r}
	if err != nil {
		rep.Error = err.Error()
	}
	if r != nil {
		if r.Hist != nil {
			rep.Hist = r.Hist.Export()
		}
		if r.E2E != nil {
			rep.E2E = r.E2E.Export()
		}
	}
	if err := json.NewEncoder(w).Encode(rep); err != nil {
		return fmt.Errorf("bench: child: %w", err)
	}
	return nil
}

// decodeChild reads a child's report back into a Result.
func decodeChild(b []byte) (*Result, error) {
	var rep childReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("bench: child: bad report: %w", err)
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	if rep.Result == nil {
		return nil, errors.New("bench: child: report without a result")
	}
	r := rep.Result
	r.Hist, r.E2E = report.NewHist(), report.NewHist()
	if rep.Hist != nil {
		r.Hist = hdrhistogram.Import(rep.Hist)
	}
	if rep.E2E != nil {
		r.E2E = hdrhistogram.Import(rep.E2E)
	}
	return r, nil
}

// RunChild is the child's side: it reads one workload (JSON) from in,
// measures it in this process, and writes the report to out. Progress
// and diagnostics go to errOut.
func RunChild(ctx context.Context, in io.Reader, out, errOut io.Writer) error {
	var w Workload
	if err := json.NewDecoder(in).Decode(&w); err != nil {
		return fmt.Errorf("bench: child: bad workload: %w", err)
	}
	ios := harness.IO{Out: errOut, Err: errOut}
	if f, ok := errOut.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			ios.ErrIsTTY = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	r, err := measure(ctx, w, ios)
	return encodeChild(out, r, err)
}

// MeasureChild runs w in a fresh child process of w.Exe and returns its
// measurement.
func MeasureChild(ctx context.Context, w Workload, ios harness.IO) (*Result, error) {
	in, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("bench: child: %w", err)
	}
	cmd := w.Wire.Command(ctx, harness.SideSink, w.Exe, ChildCommand)
	// On cancellation let the child stop its generator and engine itself;
	// kill it only if it does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = ShutdownTimeout
	cmd.Stdin = bytes.NewReader(in)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = ios.Err
	runErr := cmd.Run()
	r, err := decodeChild(out.Bytes())
	if err != nil {
		if runErr != nil && out.Len() == 0 {
			return nil, fmt.Errorf("bench: child: %w", runErr)
		}
		return nil, err
	}
	return r, nil
}

// MeasureRunner measures w in a fresh process, or in this one.
func MeasureRunner(ctx context.Context, w Workload, ios harness.IO, fresh bool) (*Result, error) {
	if fresh {
		return MeasureChild(ctx, w, ios)
	}
	return measure(ctx, w, ios)
}
