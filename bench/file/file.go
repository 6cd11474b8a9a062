package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// FileConfig configures the `file` command.
type FileConfig struct {
	Files   report.StringList // files to read; empty: a generated temporary file
	Size    report.Size       // size of the generated file
	Passes  int               // reads of each file; 0: enough for MinBytes
	Rounds  int               // measure every method this many times, alternating the order
	Runners report.StringList
	Engine  harness.EngineFlags
	Fio     bool // compare with fio when it is on PATH
	JSON    string
	Plot    string
	TempDir string // where the generated file goes; default os.TempDir
}

// Defaults of `file`.
const (
	DefaultFileSize = 256 << 20
	fileMinBytes    = 2 << 30 // bytes read per measurement when Passes is 0
)

// DefaultFileConfig returns the documented defaults.
func DefaultFileConfig() FileConfig { return FileConfig{Size: DefaultFileSize, Fio: true, Rounds: 1} }

// RegisterFlags defines c's flags on fs.
func (c *FileConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Files, "files", "comma-separated files to ingest (default: a generated temporary file of --size)")
	fs.Var(&c.Size, "size", "size of the generated file")
	fs.IntVar(&c.Passes, "passes", c.Passes, "read every file this many times (default: enough for 2GiB in all)")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "measure every method this many times, alternating the order; ratios are printed as median (min-max)")
	fs.Var(&c.Runners, "runners", "comma-separated runners (default: every one available)")
	fs.BoolVar(&c.Fio, "fio", c.Fio, "also measure fio (psync) on the same files, when fio is on PATH")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.Plot, "plot", c.Plot, "write SVG charts into `DIR`")
	c.Engine.Register(fs)
}

// Validate checks c, naming the flag at fault.
func (c FileConfig) Validate() error {
	if err := bench.ValidRunners(c.Runners); err != nil {
		return err
	}
	switch {
	case len(c.Files) == 0 && c.Size < 1:
		return errors.New("--size: must be positive")
	case c.Passes < 0:
		return fmt.Errorf("--passes: %d: must not be negative", c.Passes)
	case c.Rounds < 0:
		return fmt.Errorf("--rounds: %d: must not be negative", c.Rounds)
	}
	for _, f := range c.Files {
		fi, err := os.Stat(f)
		if err != nil {
			return fmt.Errorf("--files: %v", err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("--files: %s is not a regular file", f)
		}
	}
	return c.Engine.Validate()
}

// FileResult is one way of reading the files.
type FileResult struct {
	Method        string  `json:"method"` // a runner, "read-loop" or "fio-psync"
	Round         int     `json:"round"`
	Bytes         uint64  `json:"bytes"`
	DurationS     float64 `json:"duration_s"`
	ThroughputBps float64 `json:"throughput_bps"`
	CPUS          float64 `json:"cpu_s"`
	CPUSPerGiB    float64 `json:"cpu_s_per_gib"`
	VsFio         float64 `json:"vs_fio,omitempty"`
	VsReadLoop    float64 `json:"vs_read_loop"`
}

// FileReport is the JSON report of `file`.
type FileReport struct {
	Command string       `json:"command"` // "file"
	Host    harness.Host `json:"host"`
	Files   []string     `json:"files"`
	Passes  int          `json:"passes"`
	Buf     int64        `json:"buf"`
	Results []FileResult `json:"results"`
	// Ratios are each method's throughput over fio's and over the read
	// loop's in the same round, as median and min-max over the rounds.
	Ratios  []bench.RatioSpread `json:"ratios"`
	Skipped []bench.Skipped     `json:"skipped"`
	FioNote string              `json:"fio_note,omitempty"`
}

// File runs the `file` command.
func File(ctx context.Context, c FileConfig, ios harness.IO) (*FileReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	files := []string(c.Files)
	if len(files) == 0 {
		p, err := makeTempFile(c.TempDir, int64(c.Size))
		if err != nil {
			return nil, err
		}
		defer os.Remove(p)
		files = []string{p}
	}
	var total int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		total += fi.Size()
	}
	if total == 0 {
		return nil, errors.New("--files: every file is empty")
	}
	passes := c.Passes
	if passes == 0 {
		passes = int(max(1, (fileMinBytes+total-1)/total))
	}
	buf := int(c.Engine.Buf)
	if buf == 0 {
		buf = engine.DefaultBufSize
	}
	want := []string(c.Runners)
	if len(want) == 0 {
		want = harness.AllRunners()
	}
	runners, skipped := bench.AvailableRunners(want)
	rep := &FileReport{Command: "file", Host: harness.HostInfo(), Files: files, Passes: passes, Buf: int64(buf), Skipped: skipped}
	fmt.Fprintf(ios.Err, "sluice-bench file: %d file(s), %s, %d passes, %s buffers\n", len(files), report.FormatBytes(uint64(total)), passes, report.FormatBytes(uint64(buf)))

	// Warm the page cache, so that every method reads cached pages.
	if _, err := readLoop(files, 1, buf); err != nil {
		return nil, err
	}
	fioPath := ""
	if c.Fio {
		if path, err := exec.LookPath("fio"); err != nil {
			rep.FioNote = "fio not on PATH"
		} else {
			fioPath = path
		}
	}
	rounds := max(c.Rounds, 1)
	for round := range rounds {
		// The reference methods and the runners, in an order that flips
		// every round so that no method always runs first.
		methods := append([]string{"read-loop", "fio-psync"}, runners...)
		if round%2 == 1 {
			slices.Reverse(methods)
		}
		var res []FileResult
		for _, m := range methods {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var r FileResult
			var err error
			switch m {
			case "read-loop":
				r, err = timed(m, func() (uint64, error) { return readLoop(files, passes, buf) })
			case "fio-psync":
				if fioPath == "" {
					continue
				}
				if r, err = runFio(ctx, fioPath, files, passes, buf); err != nil {
					rep.FioNote = err.Error()
					fmt.Fprintf(ios.Err, "sluice-bench file: fio failed: %v\n", err)
					fioPath = ""
					continue
				}
			default:
				r, err = ingestFiles(m, c.Engine, files, passes)
				if err == nil && r.Bytes != uint64(total)*uint64(passes) {
					err = fmt.Errorf("read %d bytes, want %d", r.Bytes, uint64(total)*uint64(passes))
				}
			}
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", m, err)
			}
			r.Round = round
			if rounds > 1 {
				fmt.Fprintf(ios.Err, "%s (round %d/%d): %s\n", m, round+1, rounds, report.FormatRate(r.ThroughputBps))
			}
			res = append(res, r)
		}
		var rl, fio *FileResult
		for i := range res {
			switch res[i].Method {
			case "read-loop":
				rl = &res[i]
			case "fio-psync":
				fio = &res[i]
			}
		}
		for i := range res {
			r := &res[i]
			r.VsReadLoop = r.ThroughputBps / rl.ThroughputBps
			if fio != nil {
				r.VsFio = r.ThroughputBps / fio.ThroughputBps
			}
		}
		rep.Results = append(rep.Results, res...)
	}
	rep.Ratios = fileRatios(rep.Results)
	writeFileTable(ios.Out, rep)
	for _, r := range rep.Ratios {
		fmt.Fprintf(ios.Out, "%s: %.2fx (%.2f-%.2f)\n", r.Metric, r.Median, r.Min, r.Max)
	}
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	if c.Plot != "" {
		var rows []bench.SpreadSeries
		for _, r := range rep.Results {
			i := slices.IndexFunc(rows, func(s bench.SpreadSeries) bool { return s.Name == r.Method })
			if i < 0 {
				i = len(rows)
				rows = append(rows, bench.SpreadSeries{Name: r.Method})
			}
			rows[i].Rounds = append(rows[i].Rounds, r.ThroughputBps/bench.Gibibyte)
		}
		p, err := bench.SpreadChart("File read throughput, page-cached\nmedian of the rounds, min-max", "GiB/s", rows,
			func(v float64) string { return fmt.Sprintf("%.2f", v) })
		if err != nil {
			return rep, err
		}
		if err := bench.SavePlot(p, c.Plot, "file.svg", ios); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// fileRatios gives, for every method, its throughput over fio's and over
// the read loop's, round by round, as a spread.
func fileRatios(results []FileResult) []bench.RatioSpread {
	var methods []string
	vsFio, vsLoop := map[string][]float64{}, map[string][]float64{}
	for _, r := range results {
		if !slices.Contains(methods, r.Method) {
			methods = append(methods, r.Method)
		}
		if r.VsFio > 0 {
			vsFio[r.Method] = append(vsFio[r.Method], r.VsFio)
		}
		vsLoop[r.Method] = append(vsLoop[r.Method], r.VsReadLoop)
	}
	var out []bench.RatioSpread
	for _, m := range methods {
		if m == "fio-psync" || m == "read-loop" {
			continue
		}
		if xs := vsFio[m]; len(xs) > 0 {
			out = append(out, bench.Spread(m+"/fio-psync throughput", xs))
		}
		out = append(out, bench.Spread(m+"/read-loop throughput", vsLoop[m]))
	}
	return out
}

func writeFileTable(w io.Writer, rep *FileReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tround\tthroughput\tbytes\tCPU s/GiB\tvs read loop\tvs fio\t")
	for _, r := range rep.Results {
		vf := "-"
		if r.VsFio > 0 {
			vf = strconv.FormatFloat(r.VsFio, 'f', 2, 64) + "x"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.3f\t%.2fx\t%s\t\n", r.Method, r.Round+1, report.FormatRate(r.ThroughputBps), report.FormatBytes(r.Bytes), r.CPUSPerGiB, r.VsReadLoop, vf)
	}
	tw.Flush()
	if rep.FioNote != "" {
		fmt.Fprintf(w, "fio: %s\n", rep.FioNote)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Runner, s.Reason)
	}
	fmt.Fprintf(w, "kernel %s, %s; %d passes over %d file(s), %s reads\n", rep.Host.Kernel, rep.Host.Go, rep.Passes, len(rep.Files), report.FormatBytes(uint64(rep.Buf)))
}

// timed measures f's wall and CPU time.
func timed(method string, f func() (uint64, error)) (FileResult, error) {
	cpu0 := harness.CPUTime()
	t0 := time.Now()
	n, err := f()
	d := time.Since(t0)
	cpu := harness.CPUTime() - cpu0
	if err != nil {
		return FileResult{}, err
	}
	return FileResult{Method: method, Bytes: n, DurationS: d.Seconds(), ThroughputBps: float64(n) / d.Seconds(),
		CPUS: cpu.Seconds(), CPUSPerGiB: bench.CPUPerGiB(cpu.Seconds(), n)}, nil
}

// makeTempFile writes size pseudo-random bytes to a new temporary file.
func makeTempFile(dir string, size int64) (string, error) {
	f, err := os.CreateTemp(dir, "sluice-bench-*.dat")
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*131 + i>>8)
	}
	for left := size; left > 0; {
		n := int(min(left, int64(len(buf))))
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			os.Remove(f.Name())
			return "", fmt.Errorf("bench: %w", err)
		}
		left -= int64(n)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("bench: %w", err)
	}
	return f.Name(), nil
}

// readLoop reads every file passes times with plain read(2) calls of buf
// bytes, one goroutine per file: the baseline.
func readLoop(files []string, passes, buf int) (uint64, error) {
	var mu sync.Mutex
	var total uint64
	var errs []error
	var wg sync.WaitGroup
	for _, name := range files {
		wg.Go(func() {
			b := make([]byte, buf)
			var n uint64
			for range passes {
				f, err := os.Open(name)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				for {
					k, err := f.Read(b)
					n += uint64(k)
					if err != nil {
						break
					}
				}
				f.Close()
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("bench: read loop: %w", err)
	}
	return total, nil
}

// ingestFiles reads every file passes times through an engine with the
// given runner, and measures it. The consumer only counts. The clock and
// the CPU count run from the first AddSource to the last end of stream:
// like fio's own figures, they leave out setting up (mapping and
// pre-faulting the pool, 20-30 ms for the default 64 MiB) and shutting
// down, which a long-running engine pays once.
func ingestFiles(runner string, f harness.EngineFlags, files []string, passes int) (FileResult, error) {
	col := bench.NewCollector(0, false, nil)
	e, err := engine.New(f.Config(runner), f.Handler(col.Handle), engine.WithErrorHandler(col.OnError))
	if err != nil {
		return FileResult{}, err
	}
	done := col.Expect(len(files))
	var r FileResult
	r, err = timed(runner, func() (uint64, error) {
		for _, name := range files {
			src, err := srcs.NewFile(srcs.FileConfig{Path: name, Repeat: passes - 1})
			if err == nil {
				_, err = e.AddSource(src)
			}
			if err != nil {
				return 0, err
			}
		}
		<-done
		return col.Total.Load(), nil
	})
	if serr := bench.ShutdownEngine(e); err == nil {
		err = serr
	}
	if err != nil {
		return FileResult{}, err
	}
	if n := col.Errs.Load(); n > 0 {
		return FileResult{}, fmt.Errorf("bench: %d source errors", n)
	}
	return r, nil
}

// runFio runs fio's psync engine over the same files and parses its JSON.
func runFio(ctx context.Context, fio string, files []string, passes, buf int) (FileResult, error) {
	// invalidate=0: fio would otherwise drop the page cache first, and
	// the comparison is on a page-cached file.
	args := []string{"--rw=read", "--ioengine=psync", "--invalidate=0", "--bs=" + strconv.Itoa(buf), "--loops=" + strconv.Itoa(passes),
		"--group_reporting", "--output-format=json"}
	for i, f := range files {
		args = append(args, "--name=f"+strconv.Itoa(i), "--filename="+f)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, fio, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return FileResult{}, fmt.Errorf("%s %v: %w: %s", filepath.Base(fio), args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return parseFio(stdout.Bytes())
}

// parseFio reads the aggregate read figures out of fio's JSON output.
func parseFio(out []byte) (FileResult, error) {
	// fio may print notes before the JSON.
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var v struct {
		Jobs []struct {
			Read struct {
				IOBytes uint64  `json:"io_bytes"`
				BWBytes float64 `json:"bw_bytes"`
				Runtime float64 `json:"runtime"` // ms
			} `json:"read"`
			UsrCPU float64 `json:"usr_cpu"` // percent
			SysCPU float64 `json:"sys_cpu"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return FileResult{}, fmt.Errorf("fio output: %w", err)
	}
	if len(v.Jobs) == 0 || v.Jobs[0].Read.BWBytes <= 0 {
		return FileResult{}, errors.New("fio output: no read bandwidth")
	}
	j := v.Jobs[0]
	r := FileResult{Method: "fio-psync", Bytes: j.Read.IOBytes, ThroughputBps: j.Read.BWBytes, DurationS: j.Read.Runtime / 1e3}
	r.CPUS = (j.UsrCPU + j.SysCPU) / 100 * r.DurationS
	r.CPUSPerGiB = bench.CPUPerGiB(r.CPUS, r.Bytes)
	return r, nil
}
