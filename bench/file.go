package bench

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
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// FileConfig configures the `file` command.
type FileConfig struct {
	Files   StringList // files to read; empty: a generated temporary file
	Size    Size       // size of the generated file
	Passes  int        // reads of each file; 0: enough for MinBytes
	Runners StringList
	Engine  EngineFlags
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
func DefaultFileConfig() FileConfig { return FileConfig{Size: DefaultFileSize, Fio: true} }

// RegisterFlags defines c's flags on fs.
func (c *FileConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Files, "files", "comma-separated files to ingest (default: a generated temporary file of --size)")
	fs.Var(&c.Size, "size", "size of the generated file")
	fs.IntVar(&c.Passes, "passes", c.Passes, "read every file this many times (default: enough for 2GiB in all)")
	fs.Var(&c.Runners, "runners", "comma-separated runners (default: every one available)")
	fs.BoolVar(&c.Fio, "fio", c.Fio, "also measure fio (psync) on the same files, when fio is on PATH")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.Plot, "plot", c.Plot, "write SVG charts into `DIR`")
	c.Engine.register(fs)
}

// Validate checks c, naming the flag at fault.
func (c FileConfig) Validate() error {
	if err := validRunners(c.Runners); err != nil {
		return err
	}
	switch {
	case len(c.Files) == 0 && c.Size < 1:
		return errors.New("--size: must be positive")
	case c.Passes < 0:
		return fmt.Errorf("--passes: %d: must not be negative", c.Passes)
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
	return c.Engine.validate()
}

// FileResult is one way of reading the files.
type FileResult struct {
	Method        string  `json:"method"` // a runner, "read-loop" or "fio-psync"
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
	Host    Host         `json:"host"`
	Files   []string     `json:"files"`
	Passes  int          `json:"passes"`
	Buf     int64        `json:"buf"`
	Results []FileResult `json:"results"`
	Skipped []Skipped    `json:"skipped"`
	FioNote string       `json:"fio_note,omitempty"`
}

// File runs the `file` command.
func File(ctx context.Context, c FileConfig, ios IO) (*FileReport, error) {
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
		want = AllRunners()
	}
	runners, skipped := availableRunners(want)
	rep := &FileReport{Command: "file", Host: hostInfo(), Files: files, Passes: passes, Buf: int64(buf), Skipped: skipped}
	fmt.Fprintf(ios.Err, "sluice-bench file: %d file(s), %s, %d passes, %s buffers\n", len(files), FormatBytes(uint64(total)), passes, FormatBytes(uint64(buf)))

	// Warm the page cache, so that every method reads cached pages.
	if _, err := readLoop(files, 1, buf); err != nil {
		return nil, err
	}
	rl, err := timed("read-loop", func() (uint64, error) { return readLoop(files, passes, buf) })
	if err != nil {
		return nil, err
	}
	rep.Results = append(rep.Results, rl)
	var fio *FileResult
	if c.Fio {
		if path, err := exec.LookPath("fio"); err != nil {
			rep.FioNote = "fio not on PATH"
		} else if r, err := runFio(ctx, path, files, passes, buf); err != nil {
			rep.FioNote = err.Error()
			fmt.Fprintf(ios.Err, "sluice-bench file: fio failed: %v\n", err)
		} else {
			rep.Results = append(rep.Results, r)
			fio = &rep.Results[len(rep.Results)-1]
		}
	}
	for _, name := range runners {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r, err := timed(name, func() (uint64, error) { return ingestFiles(name, c.Engine, files, passes) })
		if err != nil {
			return nil, fmt.Errorf("bench: runner %s: %w", name, err)
		}
		if want := uint64(total) * uint64(passes); r.Bytes != want {
			return nil, fmt.Errorf("bench: runner %s read %d bytes, want %d", name, r.Bytes, want)
		}
		rep.Results = append(rep.Results, r)
	}
	for i := range rep.Results {
		r := &rep.Results[i]
		r.VsReadLoop = r.ThroughputBps / rl.ThroughputBps
		if fio != nil {
			r.VsFio = r.ThroughputBps / fio.ThroughputBps
		}
	}
	writeFileTable(ios.Out, rep)
	if c.JSON != "" {
		if err := writeJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	if c.Plot != "" {
		var names []string
		var vals []float64
		for _, r := range rep.Results {
			names, vals = append(names, r.Method), append(vals, r.ThroughputBps)
		}
		if err := writePlot(c.Plot, "file.svg", barChart("File read throughput", names, vals, FormatRate), ios); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func writeFileTable(w io.Writer, rep *FileReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tthroughput\tbytes\tCPU s/GiB\tvs read loop\tvs fio\t")
	for _, r := range rep.Results {
		vf := "-"
		if r.VsFio > 0 {
			vf = strconv.FormatFloat(r.VsFio, 'f', 2, 64) + "x"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.2fx\t%s\t\n", r.Method, FormatRate(r.ThroughputBps), FormatBytes(r.Bytes), r.CPUSPerGiB, r.VsReadLoop, vf)
	}
	tw.Flush()
	if rep.FioNote != "" {
		fmt.Fprintf(w, "fio: %s\n", rep.FioNote)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Runner, s.Reason)
	}
	fmt.Fprintf(w, "kernel %s, %s; %d passes over %d file(s), %s reads\n", rep.Host.Kernel, rep.Host.Go, rep.Passes, len(rep.Files), FormatBytes(uint64(rep.Buf)))
}

// timed measures f's wall and CPU time.
func timed(method string, f func() (uint64, error)) (FileResult, error) {
	cpu0 := cpuTime()
	t0 := time.Now()
	n, err := f()
	d := time.Since(t0)
	cpu := cpuTime() - cpu0
	if err != nil {
		return FileResult{}, err
	}
	return FileResult{Method: method, Bytes: n, DurationS: d.Seconds(), ThroughputBps: float64(n) / d.Seconds(),
		CPUS: cpu.Seconds(), CPUSPerGiB: cpuPerGiB(cpu.Seconds(), n)}, nil
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
// given runner, and returns the bytes delivered. The consumer only counts.
func ingestFiles(runner string, f EngineFlags, files []string, passes int) (uint64, error) {
	col := newCollector(0, false)
	e, err := engine.New(f.config(runner), engine.WithHandler(col.handle), engine.WithErrorHandler(col.onError))
	if err != nil {
		return 0, err
	}
	done := col.expect(len(files))
	for _, name := range files {
		src, err := srcs.NewFile(srcs.FileConfig{Path: name, Repeat: passes - 1})
		if err == nil {
			_, err = e.AddSource(src)
		}
		if err != nil {
			shutdownEngine(e)
			return 0, err
		}
	}
	<-done
	if err := shutdownEngine(e); err != nil {
		return 0, err
	}
	if n := col.errs.Load(); n > 0 {
		return 0, fmt.Errorf("bench: %d source errors", n)
	}
	return col.total.Load(), nil
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
	r.CPUSPerGiB = cpuPerGiB(r.CPUS, r.Bytes)
	return r, nil
}
