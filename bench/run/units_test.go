package run

import (
	"bytes"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/sink"
)

func TestWeightedJainUndoesSkew(t *testing.T) {
	w := load.SkewWeights(10, 0.2)
	bytes := make([]float64, len(w))
	for i := range w {
		bytes[i] = 1000 * w[i] // every source got exactly its share
	}
	if got := bench.WeightedJain(bytes, w); math.Abs(got-1) > 1e-12 {
		t.Errorf("weightedJain = %v, want 1", got)
	}
	if plain := report.JainIndex(bytes); plain > 0.6 {
		t.Errorf("plain Jain of a skewed split = %v, want well below 1", plain)
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
		{[]string{"--quiet-source", "20ms"}, "--quiet-source"}, // fio's only
		{[]string{"--client", "fio", "--quiet-source", "-1s"}, "--quiet-source"},
		{[]string{"--client", "fio", "--quiet-source", "10us"}, "--quiet-source"},
		{[]string{"--client", "fio", "--quiet-source", "20ms", "--framing", "newline"}, "--quiet-source"},
		{[]string{"--proto", "udp", "--client", "fio", "--sources", "4", "--msg-size", "512", "--quiet-source", "20ms"}, "--quiet-source"},
		{[]string{"--proto", "udp", "--client", "fio", "--sources", "4", "--msg-size", "512", "--peers", "epoll"}, "--peers epoll"},
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
	if err := parseRun("--client", "fio", "--peers", "gnet,go,epoll", "--quiet-source", "20ms"); err != nil {
		t.Errorf("good quiet-source flags rejected: %v", err)
	}
	if err := parseRun("--tls", "--peers", "go"); err != nil {
		t.Errorf("--tls --peers go rejected: %v", err)
	}

	sink := func(args ...string) error {
		c := sink.DefaultSinkConfig()
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
	a := &bench.Result{Runner: "uring", ThroughputBps: 1.5 * (1 << 30), Bytes: 3 << 30, CPUSPerGiB: 0.4, ThreadsMax: 5,
		RSSMaxBytes: 80 << 20, LatencyNs: report.Latency{Count: 10, P50: 1500, P99: 812_345, P999: 2_000_000, Max: 1_500_000_000},
		FairnessJain: 0.99, PoolWaits: 12345, PartialFlushes: 7, Verified: true}
	b := &bench.Result{Runner: "goroutine", ThroughputBps: 1 << 30, Bytes: 2 << 30, CPUSPerGiB: 0.5, ThreadsMax: 10,
		RSSMaxBytes: 80 << 20, LatencyNs: report.Latency{Count: 10, P50: 3000, P99: 1_624_690, P999: 3e6, Max: 2e9},
		FairnessJain: 0.9, Mismatches: []string{"x"}}
	var buf bytes.Buffer
	writeResultTable(&buf, []*bench.Result{a, b}, tableKind{})
	writeComparisons(&buf, bench.CompareRounds([]string{"uring", "goroutine"}, []*bench.Result{a, b}), nil)
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
	run := func(runner string, round int, bps, cpu float64) *bench.Result {
		return &bench.Result{Runner: runner, Round: round, ThroughputBps: bps, CPUSPerGiB: cpu}
	}
	rep := &RunReport{Config: runParams{Client: load.ClientFio, Sources: 1000, MsgSize: 1 << 10, Rounds: 3},
		Runs: []*bench.Result{run("uring", 0, 1e9, 0.5), run("uring", 1, 1.2e9, 0.6), run("uring", 2, 1.1e9, 0.55),
			run("gnet", 0, 1.3e9, 0.4), run("gnet", 1, 1.4e9, 0.45), run("gnet", 2, 1.2e9, 0.41)},
		Summary: []*bench.Result{{Runner: "uring"}, {Runner: "gnet"}}}
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

// TestQuietRunTable: a run with a quiet source gets a table of its lines'
// latency per row, a dash for a row that has none; a run without one
// gets no such table.
func TestQuietRunTable(t *testing.T) {
	rs := []*bench.Result{
		{Runner: "uring", Quiet: &load.QuietSummary{Sent: 150, Lines: 150, LatencyNs: report.Latency{Count: 150, P50: 1_230_000, P99: 48_100_000, Max: 61_000_000}}},
		{Runner: "bare-epoll"},
	}
	var buf bytes.Buffer
	writeQuietTable(&buf, rs, 20*time.Millisecond)
	want := `
quiet source: one connection beside the load sending its clock as a line every 20ms; latency of its lines, now minus the stamp, as each sink's handler got them
      runner  lines  sent     p50     p99   max
       uring    150   150  1.23ms  48.1ms  61ms
  bare-epoll      -     -       -       -     -
`
	if buf.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	writeQuietTable(&buf, rs, 0)
	if buf.Len() != 0 {
		t.Errorf("a run without a quiet source: %q", buf.String())
	}
}
