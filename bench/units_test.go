package bench

import (
	"bytes"
	"encoding/binary"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/bench/load"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
)

func TestJainIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"all zero", []float64{0, 0}, 0},
		{"equal", []float64{5, 5, 5, 5}, 1},
		{"one takes all", []float64{8, 0, 0, 0}, 0.25},
		{"two of four", []float64{1, 1, 0, 0}, 0.5},
		{"textbook", []float64{1, 2, 3}, 36.0 / 42.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := report.JainIndex(tc.xs); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("JainIndex(%v) = %v, want %v", tc.xs, got, tc.want)
			}
		})
	}
}

func TestWeightedJainUndoesSkew(t *testing.T) {
	w := load.SkewWeights(10, 0.2)
	bytes := make([]float64, len(w))
	for i := range w {
		bytes[i] = 1000 * w[i] // every source got exactly its share
	}
	if got := weightedJain(bytes, w); math.Abs(got-1) > 1e-12 {
		t.Errorf("weightedJain = %v, want 1", got)
	}
	if plain := report.JainIndex(bytes); plain > 0.6 {
		t.Errorf("plain Jain of a skewed split = %v, want well below 1", plain)
	}
}

// fakeRec collects recorded values.
type fakeRec struct{ vals []int64 }

func (r *fakeRec) RecordValue(v int64) error {
	r.vals = append(r.vals, v)
	return nil
}

// stampedStream builds n messages of size bytes whose scheduled times are
// 1000, 2000, ... and whose send times are 500 ns later.
func stampedStream(n, size int) []byte {
	b := make([]byte, n*size)
	for i := range n {
		binary.LittleEndian.PutUint64(b[i*size+load.SchedOff:], uint64(1000*(i+1)))
		binary.LittleEndian.PutUint64(b[i*size+load.SentOff:], uint64(1000*(i+1)+500))
		for j := load.TimestampSize; j < size; j++ {
			b[i*size+j] = 0xEE // payload that must never be read as a timestamp
		}
	}
	return b
}

func TestRecordTrackerAcrossChunkBoundaries(t *testing.T) {
	const now = 1 << 30
	for _, size := range []int{16, 17, 24, 100, 4096} {
		stream := stampedStream(50, size)
		for _, split := range []string{"whole", "bytewise", "random"} {
			var chunks [][]byte
			switch split {
			case "whole":
				chunks = [][]byte{stream}
			case "bytewise":
				for i := range stream {
					chunks = append(chunks, stream[i:i+1])
				}
			case "random":
				rng := rand.New(rand.NewPCG(uint64(size), 7))
				for rest := stream; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(2*size))
					chunks, rest = append(chunks, rest[:n]), rest[n:]
				}
			}
			tr := load.RecordTracker{Size: size}
			var rec, e2e fakeRec
			total := 0
			for _, c := range chunks {
				total += tr.Feed(c, now, &rec, &e2e)
			}
			if total != 50 || len(rec.vals) != 50 || len(e2e.vals) != 50 {
				t.Fatalf("size %d, %s: %d headers (%d, %d recorded), want 50", size, split, total, len(rec.vals), len(e2e.vals))
			}
			for i := range rec.vals {
				if want := int64(now - 1000*(i+1) - 500); rec.vals[i] != want {
					t.Fatalf("size %d, %s: engine latency %d = %d, want %d", size, split, i, rec.vals[i], want)
				}
				if want := int64(now - 1000*(i+1)); e2e.vals[i] != want {
					t.Fatalf("size %d, %s: end-to-end latency %d = %d, want %d", size, split, i, e2e.vals[i], want)
				}
			}
			if tr.Pos != 0 {
				t.Errorf("size %d, %s: tracker ends at offset %d, want 0", size, split, tr.Pos)
			}
		}
	}
}

func TestRecordTrackerClampsFutureTimestamps(t *testing.T) {
	tr := load.RecordTracker{Size: 16}
	var rec, e2e fakeRec
	tr.Feed(stampedStream(1, 16), 0, &rec, &e2e) // stamped 1000ns "in the future"
	if len(rec.vals) != 1 || rec.vals[0] != 0 || len(e2e.vals) != 1 || e2e.vals[0] != 0 {
		t.Errorf("recorded %v and %v, want [0] and [0]", rec.vals, e2e.vals)
	}
}

func BenchmarkRecordTracker(b *testing.B) {
	for _, size := range []int{64, 1024, 16 << 10} {
		b.Run(report.FormatBytes(uint64(size)), func(b *testing.B) {
			chunk := stampedStream((64<<10)/size, size)
			h, h2 := report.NewHist(), report.NewHist()
			tr := load.RecordTracker{Size: size}
			now := time.Now().UnixNano()
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			for b.Loop() {
				tr.Feed(chunk[:len(chunk)/3], now, h, h2)
				tr.Feed(chunk[len(chunk)/3:], now, h, h2)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunk)/size), "ns/record")
		})
	}
}

func TestRecordTrackerAllocs(t *testing.T) {
	chunk := stampedStream(64, 1024)
	h, h2 := report.NewHist(), report.NewHist()
	tr := load.RecordTracker{Size: 1024}
	if n := testing.AllocsPerRun(100, func() { tr.Feed(chunk[5:], 1<<30, h, h2) }); n != 0 {
		t.Errorf("feed allocates %v times per chunk, want 0", n)
	}
}

func TestPacerMeanGap(t *testing.T) {
	const rate, size = 1 << 20, 1024 // 1024 messages a second: ~976.6µs apart
	mean := float64(size) / rate * 1e9
	for _, arrivals := range []string{load.ArrivalsPoisson, load.ArrivalsUniform} {
		p, err := load.NewPacer(arrivals, rate, size, 42)
		if err != nil {
			t.Fatal(err)
		}
		const n = 20000
		first := p.Advance()
		var last int64
		var sq float64
		prev := first
		for range n {
			last = p.Advance()
			d := float64(last - prev)
			sq += (d - mean) * (d - mean)
			prev = last
		}
		got := float64(last-first) / n
		if math.Abs(got-mean)/mean > 0.03 {
			t.Errorf("%s: mean gap %.0fns, want %.0fns ±3%%", arrivals, got, mean)
		}
		sd := math.Sqrt(sq / n)
		switch arrivals {
		case load.ArrivalsPoisson: // exponential: standard deviation equals the mean
			if math.Abs(sd-mean)/mean > 0.05 {
				t.Errorf("poisson: gap sd %.0fns, want about %.0fns", sd, mean)
			}
		case load.ArrivalsUniform:
			if sd > 2 {
				t.Errorf("uniform: gap sd %.1fns, want ~0", sd)
			}
			if first < 0 || float64(first) > mean {
				t.Errorf("uniform: phase %d outside [0, %.0f)", first, mean)
			}
		}
	}
	if _, err := load.NewPacer("bursty", rate, size, 1); err == nil {
		t.Error("unknown arrival model accepted")
	}
	if _, err := load.NewPacer(load.ArrivalsPoisson, 0, size, 1); err == nil {
		t.Error("zero rate accepted")
	}
}

func TestSkewWeights(t *testing.T) {
	for _, tc := range []struct {
		n         int
		f         float64
		hot       int
		hotShare  float64 // fraction of the load on the hot sources
		uniformly bool
	}{
		{10, 0, 0, 0, true},
		{10, 0.2, 2, 0.8, false},
		{1000, 0.1, 100, 0.9, false},
		{3, 0.1, 1, 0.9, false},
		{1, 0.2, 0, 0, true},
		{10, 0.5, 5, 0.5, false},
	} {
		w := load.SkewWeights(tc.n, tc.f)
		var sum, hot float64
		for i, x := range w {
			sum += x
			if i < tc.hot {
				hot += x
			}
		}
		if math.Abs(sum-float64(tc.n)) > 1e-9 {
			t.Errorf("SkewWeights(%d, %v) sums to %v, want %d", tc.n, tc.f, sum, tc.n)
		}
		if tc.uniformly {
			for _, x := range w {
				if x != 1 {
					t.Errorf("SkewWeights(%d, %v) = %v, want all 1", tc.n, tc.f, w)
					break
				}
			}
			continue
		}
		if got := hot / sum; math.Abs(got-tc.hotShare) > 1e-9 {
			t.Errorf("SkewWeights(%d, %v): hot sources carry %v of the load, want %v", tc.n, tc.f, got, tc.hotShare)
		}
	}
}

func TestParseSizeAndRate(t *testing.T) {
	for in, want := range map[string]report.Size{"4096": 4096, "64KiB": 64 << 10, "16 KiB": 16 << 10, "1MiB": 1 << 20, "1MB": 1e6} {
		if got, err := report.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]report.Rate{"1MiB/s": 1 << 20, "500KB/s": 500e3, "0": 0, "unlimited": 0, "10MiB": 10 << 20} {
		if got, err := report.ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"lots", "-5", "1XB"} {
		if _, err := report.ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

// parseRun parses args as the run command does, then validates.
func parseRun(args ...string) error {
	c := DefaultRunConfig()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.Validate()
}

func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--sources", "x"}, "-sources"},
		{[]string{"--sources", "0"}, "--sources"},
		{[]string{"--rounds", "0"}, "--rounds"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--msg-size", "4"}, "--msg-size"},
		{[]string{"--msg-size", "huge"}, "-msg-size"},
		{[]string{"--rate", "fast"}, "-rate"},
		{[]string{"--arrivals", "bursty"}, "--arrivals"},
		{[]string{"--skew", "0.2"}, "--skew"}, // needs --rate
		{[]string{"--skew", "1.5", "--rate", "1MiB/s"}, "--skew"},
		{[]string{"--runners", "uring,fibers"}, "--runners"},
		{[]string{"--runners", "uring,goroutine,uring"}, "--runners: uring is named twice"},
		{[]string{"--buf", "1000"}, "--buf"}, // not a power of two
		{[]string{"--pool", "-1"}, "--pool"},
		{[]string{"--max-dial", "0"}, "--max-dial"},
		{[]string{"--nonsense"}, "-nonsense"},
		{[]string{"--client", "wrk"}, "--client"},
		{[]string{"--peers", "netty"}, "--peers"},
		{[]string{"--peers", "go,gnet,go"}, "--peers: go is named twice"},
		{[]string{"--gen-pacing", "lumpy", "--rate", "1MiB/s"}, "--pacing"},
		{[]string{"--record-size", "64"}, "--record-size"},                    // fio's only
		{[]string{"--client", "fio", "--record-size", "64"}, "--record-size"}, // needs --framing newline
		{[]string{"--client", "fio", "--framing", "newline", "--msg-size", "1000"}, "--msg-size"},
		{[]string{"--client", "fio", "--framing", "newline", "--record-size", "1KiB"}, "--record-size"},
		{[]string{"--client", "fio", "--framing", "octet"}, "--framing"},
		{[]string{"--client", "fio", "--sources", "5000"}, "--sources"},
		{[]string{"--client", "fio", "--rate", "1MiB/s", "--skew", "0.2"}, "--skew"},
		{[]string{"--client", "fio", "--rate", "1MiB/s", "--gen-pacing", "batch"}, "--gen-pacing"},
		{[]string{"--client", "fio", "--target", "p99<=1"}, "--target"},
		{[]string{"--peers", "gnet", "--framing", "octet"}, "--peers"},
		{[]string{"--peers", "go", "--framing", "octet"}, "--peers"},
		{[]string{"--tls", "--peers", "gnet"}, "--peers gnet"},
	} {
		err := parseRun(tc.args...)
		if err == nil {
			t.Errorf("run %v: no error", tc.args)
			continue
		}
		if !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("run %v: error %q does not name %s", tc.args, err, tc.flag)
		}
	}
	if err := parseRun("--runners", "goroutine", "--rate", "1MiB/s", "--skew", "0.2", "--arrivals", "uniform"); err != nil {
		t.Errorf("good flags rejected: %v", err)
	}
	if err := parseRun("--client", "fio", "--peers", "gnet", "--framing", "newline", "--msg-size", "16KiB", "--record-size", "128"); err != nil {
		t.Errorf("good fio flags rejected: %v", err)
	}
	if err := parseRun("--tls", "--peers", "go"); err != nil {
		t.Errorf("--tls --peers go rejected: %v", err)
	}

	sink := func(args ...string) error {
		c := DefaultSinkConfig()
		fs := flag.NewFlagSet("sink", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			return err
		}
		return c.Validate()
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--listen", "nowhere"}, "--listen"},
		{[]string{"--ports", "0"}, "--ports"},
		{[]string{"--listen", "127.0.0.1:0", "--ports", "4"}, "--ports"},
		{[]string{"--runner", "fibers"}, "--runner"},
		{[]string{"--until-idle", "-1s"}, "--until-idle"},
		{[]string{"--max-conns", "-1"}, "--max-conns"},
	} {
		if err := sink(tc.args...); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("sink %v: error %v does not name %s", tc.args, err, tc.flag)
		}
	}
}

func TestResultTable(t *testing.T) {
	a := &Result{Runner: "uring", ThroughputBps: 1.5 * (1 << 30), Bytes: 3 << 30, CPUSPerGiB: 0.4, ThreadsMax: 5,
		RSSMaxBytes: 80 << 20, LatencyNs: report.Latency{Count: 10, P50: 1500, P99: 812_345, P999: 2_000_000, Max: 1_500_000_000},
		FairnessJain: 0.99, PoolWaits: 12345, PartialFlushes: 7, Verified: true}
	b := &Result{Runner: "goroutine", ThroughputBps: 1 << 30, Bytes: 2 << 30, CPUSPerGiB: 0.5, ThreadsMax: 10,
		RSSMaxBytes: 80 << 20, LatencyNs: report.Latency{Count: 10, P50: 3000, P99: 1_624_690, P999: 3e6, Max: 2e9},
		FairnessJain: 0.9, Mismatches: []string{"x"}}
	var buf bytes.Buffer
	writeResultTable(&buf, []*Result{a, b}, tableKind{})
	writeComparisons(&buf, compareRounds([]string{"uring", "goroutine"}, []*Result{a, b}), nil)
	out := buf.String()
	for _, want := range []string{
		"1.5 GiB/s", "3.0 GiB", "80 MiB", "1.5µs", "812.35µs", "1.5s", "12,345", "0.9900", "ok", "FAIL(1)",
		"uring/goroutine: 1.50x throughput, 0.80x CPU-s/GiB, 0.50x p99, 1.00x RSS, 0.50x threads",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(out, "\n")
	if n := utf8.RuneCountInString; n(lines[0]) != n(lines[1]) || n(lines[1]) != n(lines[2]) {
		t.Errorf("table rows are not aligned:\n%s", out)
	}
}

func TestPlots(t *testing.T) {
	dir := t.TempDir()
	ios := harness.IO{Out: io.Discard, Err: io.Discard}
	run := func(runner string, round int, bps, cpu float64) *Result {
		return &Result{Runner: runner, Round: round, ThroughputBps: bps, CPUSPerGiB: cpu}
	}
	rep := &RunReport{Config: runParams{Client: ClientFio, Sources: 1000, MsgSize: 1 << 10, Rounds: 3},
		Runs: []*Result{run("uring", 0, 1e9, 0.5), run("uring", 1, 1.2e9, 0.6), run("uring", 2, 1.1e9, 0.55),
			run("gnet", 0, 1.3e9, 0.4), run("gnet", 1, 1.4e9, 0.45), run("gnet", 2, 1.2e9, 0.41)},
		Summary: []*Result{{Runner: "uring"}, {Runner: "gnet"}}}
	if err := writeRunPlots(dir, rep, ios); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"throughput.svg", "cpu.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		svg := string(b)
		if !strings.Contains(svg, "<svg") || !strings.Contains(svg, "uring") || !strings.Contains(svg, "gnet") {
			t.Errorf("%s lacks its rows:\n%.400s", name, svg)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cpu.svg")); !strings.Contains(string(b), "0.550") || !strings.Contains(string(b), "0.410") {
		t.Errorf("cpu.svg does not label the medians 0.550 and 0.410")
	}

}
