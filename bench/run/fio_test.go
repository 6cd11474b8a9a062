package run

import (
	"cmp"
	"encoding/json"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/benchtest"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/bench/sink"
)

// EnvRequireFio makes the fio tests fail, not skip, when fio is missing
// (CI sets it; make deps installs fio).
const EnvRequireFio = "SLUICE_REQUIRE_FIO"

// needFio returns fio's path, or skips the test (fails it under
// SLUICE_REQUIRE_FIO=1).
func needFio(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("fio")
	if err != nil {
		if os.Getenv(EnvRequireFio) == "1" {
			t.Fatalf("fio is not installed and %s=1", EnvRequireFio)
		}
		t.Skip("fio is not installed (make deps)")
	}
	return p
}

// buildGnetSinkForTest builds the gnet sink into a temporary directory.
func buildGnetSinkForTest(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gnetsink")
	cmd := exec.Command(peers.GoTool(), "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "gnetsink")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build the gnet sink: %v\n%s", err, out)
	}
	return bin
}

func TestFioJobFile(t *testing.T) {
	j := load.FioJob{Addr: "127.0.0.1:9300", Sources: 3, Duration: 1500 * time.Millisecond, BS: 16 << 10, Rate: 65536,
		Arrivals: load.ArrivalsPoisson, RecordSize: 4, NoDelay: true, CPUs: []int{1}}
	f := j.File()
	for _, want := range []string{"ioengine=net\n", "hostname=127.0.0.1\n", "port=9300\n", "bs=16384\n", "runtime=1500ms\n",
		"time_based=1\n", "nodelay=1\n", "rate=65536\n", "rate_process=poisson\n", "scramble_buffers=0\n",
		"buffer_pattern=0x7878780a\n", "cpus_allowed=1\n", "[s1]\n[s2]\n[s3]\n"} {
		if !strings.Contains(f, want) {
			t.Errorf("job file lacks %q:\n%s", want, f)
		}
	}
	j.Rate, j.RecordSize, j.CPUs = 0, 0, nil
	f = j.File()
	for _, no := range []string{"rate", "buffer_pattern", "cpus_allowed"} {
		if strings.Contains(f, no) {
			t.Errorf("an unpaced, raw, unpinned job file has %q:\n%s", no, f)
		}
	}
}

// TestReconcileFio checks that every way the sink's totals can differ
// from fio's is caught, and that matching ones pass.
func TestReconcileFio(t *testing.T) {
	fio := &load.FioReport{}
	for _, b := range []uint64{1280, 2560} {
		j := load.FioJobReport{Name: "s", JobRuntime: 1000}
		j.Write.IOBytes = b
		fio.Jobs = append(fio.Jobs, j)
	}
	good := func() *sink.SinkReport {
		return &sink.SinkReport{Sources: 2, Bytes: 1280 + 2560 + 16, Records: 30, Streams: []sink.SinkStream{
			{Peer: "a", Bytes: 2568, Records: 20, TruncatedBytes: 8},
			{Peer: "b", Bytes: 1288, Records: 10, TruncatedBytes: 8},
		}}
	}
	if m := reconcileFio(good(), fio, 2, 128); len(m) != 0 {
		t.Fatalf("matching totals: %v", m)
	}
	for _, tc := range []struct {
		name  string
		spoil func(*sink.SinkReport)
		want  string
	}{
		{"a byte short", func(s *sink.SinkReport) { s.Bytes--; s.Streams[0].Bytes--; s.Streams[0].TruncatedBytes-- }, "the sink read"},
		{"a connection missing", func(s *sink.SinkReport) { s.Sources = 1; s.Streams = s.Streams[:1]; s.Bytes = 2568 }, "sources asked for"},
		{"bytes moved between connections", func(s *sink.SinkReport) {
			s.Streams[0].Bytes, s.Streams[1].Bytes = 2568-128, 1288+128
			s.Streams[0].Records, s.Streams[1].Records = 19, 11
		}, "connections' byte counts differ"},
		{"a line not counted", func(s *sink.SinkReport) { s.Streams[1].Records--; s.Records-- }, "lines"},
		{"an error", func(s *sink.SinkReport) { s.Errors = 1 }, "source errors"},
	} {
		s := good()
		tc.spoil(s)
		m := reconcileFio(s, fio, 2, 128)
		if len(m) == 0 || !strings.Contains(strings.Join(m, "\n"), tc.want) {
			t.Errorf("%s: mismatches %q, want one saying %q", tc.name, m, tc.want)
		}
	}
	fio.Jobs[0].Error = 5
	if m := reconcileFio(good(), fio, 2, 128); len(m) == 0 || !strings.Contains(m[0], "error 5") {
		t.Errorf("a failed fio job: %q", m)
	}
}

// TestFioClient runs `run --client fio` briefly for one runner and the
// gnet peer (once Go's instead), raw and with newline records, and requires every row to
// reconcile with fio's report: the check `make test` makes of the fio
// mode.
func TestFioClient(t *testing.T) {
	needFio(t)
	bin := benchtest.BuildCLI(t)
	gnet := buildGnetSinkForTest(t)
	avail, _ := bench.AvailableRunners([]string{"uring", "epoll", "goroutine"})
	if len(avail) == 0 {
		t.Fatal("no runner available")
	}
	runner := avail[0]
	for _, tc := range []struct {
		name   string
		rounds int
		args   []string
		peer   string // default gnet
	}{
		{"bulk", 1, []string{"--sources", "20", "--msg-size", "64KiB"}, ""},
		{"paced", 2, []string{"--sources", "50", "--msg-size", "1KiB", "--rate", "64KiB/s"}, ""},
		{"lines", 1, []string{"--sources", "20", "--msg-size", "16KiB", "--framing", "newline"}, ""},
		// The consumer inline on the runner's worker, as gnet's is.
		{"lines-inline", 1, []string{"--sources", "20", "--msg-size", "16KiB", "--framing", "newline", "--inline"}, ""},
		{"lines-go", 1, []string{"--sources", "20", "--msg-size", "16KiB", "--framing", "newline"}, peers.Go},
		{"lines-epoll", 1, []string{"--sources", "20", "--msg-size", "16KiB", "--framing", "newline"}, peers.Epoll},
		// A quiet source beside the load, its lines timed by every sink.
		{"bulk-quiet-epoll", 1, []string{"--sources", "20", "--msg-size", "64KiB", "--quiet-source", "20ms"}, peers.Epoll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := cmp.Or(tc.peer, peers.Gnet)
			jsonPath := filepath.Join(t.TempDir(), "run.json")
			args := append([]string{"run", "--client", "fio", "--runners", runner, "--peers", peer, "--gnet-sink", gnet,
				"--duration", "1s", "--rounds", strconv.Itoa(tc.rounds), "--json", jsonPath, "--plot", t.TempDir()}, tc.args...)
			stdout, stderr, status := benchtest.RunCLI(t, bin, args...)
			if status != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
			}
			for _, row := range []string{runner, peers.Row(peer)} {
				if !regexp.MustCompile(`(?m)^\s*` + row + `\s+\d.*\sok\s*$`).MatchString(stdout) {
					t.Errorf("no verified row for %s:\n%s", row, stdout)
				}
			}
			if !strings.Contains(stdout, runner+"/"+peers.Row(peer)+": ") {
				t.Errorf("no ratio against %s:\n%s", peer, stdout)
			}
			rep := readRunReport(t, jsonPath)
			if !rep.OK || rep.Config.Client != load.ClientFio || len(rep.Runs) != 2*tc.rounds {
				t.Fatalf("report: ok %v client %q, %d runs, want %d", rep.OK, rep.Config.Client, len(rep.Runs), 2*tc.rounds)
			}
			// Rounds alternate the rows' order.
			if tc.rounds == 2 && (rep.Runs[0].Runner != runner || rep.Runs[2].Runner != peers.Row(peer)) {
				t.Errorf("round order %s, %s, %s, %s", rep.Runs[0].Runner, rep.Runs[1].Runner, rep.Runs[2].Runner, rep.Runs[3].Runner)
			}
			for _, r := range rep.Runs {
				if !r.Verified || r.Bytes == 0 || r.CPUSPerGiB <= 0 || r.ThroughputBps <= 0 || r.GenSentBytes != r.Bytes {
					t.Errorf("%s round %d: verified %v, %d bytes (fio sent %d), %.3f CPU-s/GiB, %.0f B/s: %v",
						r.Runner, r.Round, r.Verified, r.Bytes, r.GenSentBytes, r.CPUSPerGiB, r.ThroughputBps, r.Mismatches)
				}
				if r.CPUSPerGiBListened <= 0 || (r.CPUOver != bench.CPUOverListened && r.CPUOver != r.ThroughputOver) {
					t.Errorf("%s round %d: CPU over %q, throughput over %q, %.3f CPU-s/GiB listened",
						r.Runner, r.Round, r.CPUOver, r.ThroughputOver, r.CPUSPerGiBListened)
				}
				if q := r.Quiet; slices.Contains(tc.args, "--quiet-source") && (q == nil || q.Sent == 0 || q.Lines != q.Sent || q.LatencyNs.Count != int64(q.Lines) || q.LatencyNs.Max <= 0) {
					t.Errorf("%s round %d: quiet source %+v", r.Runner, r.Round, q)
				}
				if slices.Contains(tc.args, "newline") && (r.Records == 0 || r.TruncatedBytes < load.FioTrailer*uint64(r.Sources)) {
					t.Errorf("%s round %d: %d records, %d truncated bytes", r.Runner, r.Round, r.Records, r.TruncatedBytes)
				}
			}
		})
	}
}

// TestRunPeersGnet runs the gnet peer beside a runner under the built-in
// generator, raw and framed: every stream's bytes, checksum and records
// must match what the generator sent.
func TestRunPeersGnet(t *testing.T) {
	bin := benchtest.BuildCLI(t)
	gnet := buildGnetSinkForTest(t)
	avail, _ := bench.AvailableRunners([]string{"uring", "epoll", "goroutine"})
	for _, framing := range []string{"none", "newline"} {
		stdout, stderr, status := benchtest.RunCLI(t, bin, "run", "--runners", avail[0], "--peers", "gnet", "--gnet-sink", gnet,
			"--sources", "20", "--duration", "1s", "--msg-size", "4KiB", "--framing", framing)
		if status != 0 {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", framing, status, stdout, stderr)
		}
		if !regexp.MustCompile(`(?m)^\s*gnet\s+\d.*\sok\s*$`).MatchString(stdout) {
			t.Errorf("%s: no verified gnet row:\n%s", framing, stdout)
		}
	}
}

// readRunReport reads the report `run --json` wrote to path.
func readRunReport(t *testing.T, path string) RunReport {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep RunReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestRunPeersGoTLS runs Go's reference sink beside the goroutine runner
// under run --tls: the rows come in the order the report's ratios need
// (the TLS rows first), every row receives exactly what the generator
// sent on every stream, the go+tls row's sessions are TLS, and the report
// compares go+tls with go.
func TestRunPeersGoTLS(t *testing.T) {
	bin := benchtest.BuildCLI(t)
	sink := buildGnetSinkForTest(t)
	const sources = 3
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	stdout, stderr, status := benchtest.RunCLI(t, bin, "run", "--tls", "--runners", "goroutine", "--peers", "go", "--gnet-sink", sink,
		"--sources", strconv.Itoa(sources), "--duration", "1s", "--msg-size", "64KiB", "--json", jsonPath)
	if status != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	rep := readRunReport(t, jsonPath)
	var rows []string
	for _, r := range rep.Runs {
		rows = append(rows, r.Runner)
		if r.Bytes == 0 || r.Bytes != r.GenSentBytes || r.StreamsVerified != sources || !r.Verified {
			t.Errorf("%s: %d bytes of %d sent, %d streams verified, verified %v: want every byte sent received, %d streams' bytes and CRC-32C reconciled",
				r.Runner, r.Bytes, r.GenSentBytes, r.StreamsVerified, r.Verified, sources)
		}
		if tls := strings.HasPrefix(r.TLS, "TLS 1.3 "); tls != strings.HasSuffix(r.Runner, "+tls") {
			t.Errorf("%s: sessions %q", r.Runner, r.TLS)
		}
	}
	if want := []string{RowTLS, peers.GoTLS, "goroutine", peers.Go}; !rep.OK || !slices.Equal(rows, want) {
		t.Fatalf("ok %v, rows %v, want %v", rep.OK, rows, want)
	}
	var pairs []string
	for _, c := range rep.Ratios {
		pairs = append(pairs, c.A+"/"+c.B)
	}
	if want := []string{RowTLS + "/" + peers.GoTLS, RowTLS + "/goroutine", RowTLS + "/" + peers.Go, peers.GoTLS + "/" + peers.Go}; !slices.Equal(pairs, want) {
		t.Errorf("comparisons %v, want %v", pairs, want)
	}
	if !strings.Contains(stdout, peers.GoTLS+"/"+peers.Go+": ") {
		t.Errorf("no go+tls/go line:\n%s", stdout)
	}
}

func TestConcurrentThroughput(t *testing.T) {
	// Ten streams of 1 MB/s for 10 s each, started 1 s apart: all ten
	// overlap from 9 s to 10 s only, nine of them from 8 s to 11 s.
	var ss []sink.SinkStream
	for i := range 10 {
		ss = append(ss, sink.SinkStream{Bytes: 10e6, FirstNs: int64(i) * 1e9, LastNs: int64(i)*1e9 + 10e9})
	}
	bps, secs := concurrentThroughput(ss, 0.9)
	if secs != 1 || math.Abs(bps-10e6) > 1 {
		t.Errorf("all ten: %.0f B/s over %.1f s, want 10 MB/s over 1 s", bps, secs)
	}
	bps, secs = concurrentThroughput(ss, 0.8)
	if secs != 3 || math.Abs(bps-(10e6*3-2e6)/3) > 1 {
		t.Errorf("eight of ten: %.0f B/s over %.1f s, want 28/3 MB/s over 3 s", bps, secs)
	}
	if _, secs := concurrentThroughput([]sink.SinkStream{{Bytes: 1, FirstNs: 5, LastNs: 5}}, 0.9); secs != 0 {
		t.Errorf("a stream without duration gave an interval of %v s", secs)
	}
}

// TestEngineFlagsArgs checks that a sink child started with
// EngineFlags.args gets the engine settings that were set.
func TestEngineFlagsArgs(t *testing.T) {
	want := harness.EngineFlags{Pool: 64, Buf: 16 << 10, Workers: 3, Flush: 2 * time.Millisecond, BatchWait: 100 * time.Microsecond,
		RecvBuffer: 1 << 20, Framing: "newline", Inline: true, FileSlots: -1}
	c := sink.DefaultSinkConfig()
	fs := flag.NewFlagSet("sink", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(want.Args()); err != nil {
		t.Fatal(err)
	}
	got := c.Engine
	got.TLS = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sink flags %v gave %+v, want %+v", want.Args(), got, want)
	}
}
