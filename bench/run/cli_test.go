package run

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/benchtest"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/sink"
)

func TestCLI(t *testing.T) {
	bin := benchtest.BuildCLI(t)
	t.Run("run", func(t *testing.T) { testCLIRun(t, bin) })
	t.Run("sink", func(t *testing.T) { testCLISink(t, bin) })
	t.Run("sink framed", func(t *testing.T) { testCLISinkFramed(t, bin) })
	t.Run("run framed", func(t *testing.T) { testCLIRunFramed(t, bin) })
	t.Run("run tls", func(t *testing.T) { testCLIRunTLS(t, bin) })
	t.Run("probe", func(t *testing.T) { testCLIProbe(t, bin) })
	t.Run("usage", func(t *testing.T) { testCLIUsage(t, bin) })
}

func testCLIRun(t *testing.T, bin string) {
	avail, _ := bench.AvailableRunners(harness.AllRunners())
	runners := avail[:min(2, len(avail))]
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	plotDir := filepath.Join(t.TempDir(), "plots")
	stdout, stderr, status := benchtest.RunCLI(t, bin, "run", "--runners", strings.Join(runners, ","), "--sources", "20",
		"--duration", "1s", "--msg-size", "4KiB", "--json", jsonPath, "--plot", plotDir)
	if status != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	for _, r := range runners {
		if !regexp.MustCompile(`(?m)^\s*` + r + `\s+\d`).MatchString(stdout) {
			t.Errorf("table has no row for %s:\n%s", r, stdout)
		}
	}
	if len(runners) == 2 && !strings.Contains(stdout, runners[0]+"/"+runners[1]+": ") {
		t.Errorf("no ratio line:\n%s", stdout)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	// Check the documented field names, not just our struct.
	var rep struct {
		Command string           `json:"command"`
		OK      bool             `json:"ok"`
		Host    map[string]any   `json:"host"`
		Runs    []map[string]any `json:"runs"`
		Ratios  []map[string]any `json:"ratios"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Command != "run" || !rep.OK || len(rep.Runs) != len(runners) || rep.Host["kernel"] == "" || rep.Host["go"] == "" {
		t.Fatalf("report: command %q ok %v runs %d host %v", rep.Command, rep.OK, len(rep.Runs), rep.Host)
	}
	for i, r := range rep.Runs {
		num := func(k string) float64 {
			v, ok := r[k].(float64)
			if !ok {
				t.Errorf("run %d: field %q missing or not a number: %v", i, k, r[k])
			}
			return v
		}
		if r["runner"] != runners[i] {
			t.Errorf("run %d: runner %v, want %s", i, r["runner"], runners[i])
		}
		if num("sources") != 20 {
			t.Errorf("run %d: sources %v", i, r["sources"])
		}
		if num("bytes") <= 0 || num("throughput_bps") <= 0 || num("cpu_s_per_gib") <= 0 {
			t.Errorf("run %d: bytes %v throughput %v cpu/GiB %v", i, r["bytes"], r["throughput_bps"], r["cpu_s_per_gib"])
		}
		if num("threads_max") < 1 || num("rss_max_bytes") <= 0 {
			t.Errorf("run %d: threads %v rss %v", i, r["threads_max"], r["rss_max_bytes"])
		}
		if f := num("fairness_jain"); f <= 0 || f > 1 {
			t.Errorf("run %d: fairness %v", i, f)
		}
		num("pool_waits")
		num("partial_flushes")
		lat, ok := r["latency_ns"].(map[string]any)
		if !ok {
			t.Fatalf("run %d: latency_ns missing", i)
		}
		p50, p99, p999, mx := lat["p50"].(float64), lat["p99"].(float64), lat["p999"].(float64), lat["max"].(float64)
		if !(p50 > 0 && p50 <= p99 && p99 <= p999 && p999 <= mx) {
			t.Errorf("run %d: latency p50 %v p99 %v p999 %v max %v", i, p50, p99, p999, mx)
		}
		if r["verified"] != true {
			t.Errorf("run %d: not verified: %v", i, r["mismatches"])
		}
		for _, k := range []string{"e2e_latency_ns", "gen_lag_ns", "counters"} {
			if _, ok := r[k].(map[string]any); !ok {
				t.Errorf("run %d: %s missing", i, k)
			}
		}
		if _, ok := r["generator_bound"].(bool); !ok {
			t.Errorf("run %d: generator_bound missing", i)
		}
		if b := r["bottleneck"]; b != bench.BottleneckGenerator && b != bench.BottleneckEngine && b != bench.BottleneckKernel && b != bench.BottleneckNeither {
			t.Errorf("run %d: bottleneck %v of an unpaced run", i, b)
		}
		if num("engine_cpus") < 1 || num("gen_cpu_util") <= 0 {
			t.Errorf("run %d: engine_cpus %v gen_cpu_util %v", i, r["engine_cpus"], r["gen_cpu_util"])
		}
	}
	if len(runners) == 2 && len(rep.Ratios) != 1 {
		t.Errorf("ratios: %v", rep.Ratios)
	}
	if _, err := os.Stat(filepath.Join(plotDir, "throughput.svg")); err != nil {
		t.Error(err)
	}
}

// client is one loopback connection the sink test makes.
type client struct {
	local string
	bytes int
	crc   uint32
}

func testCLISink(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "sink", "--listen", "127.0.0.1:0", "--runner", "auto",
		"--until-idle", "300ms", "--json", "-", "--pool", "64", "--buf", "16KiB")
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	addr := ""
	re := regexp.MustCompile(`^sluice-bench sink: listening on (\S+)`)
	var stderr strings.Builder
	for sc.Scan() {
		stderr.WriteString(sc.Text() + "\n")
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			addr = strings.TrimSuffix(m[1], ",")
			break
		}
	}
	if addr == "" {
		cmd.Wait()
		t.Fatalf("sink never said it was listening:\n%s", stderr.String())
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
		}
	}()

	clients := make([]client, 4)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			buf := make([]byte, 1000+i*50000)
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			if _, err := c.Write(buf); err != nil {
				t.Error(err)
				return
			}
			clients[i] = client{local: c.LocalAddr().String(), bytes: len(buf), crc: crc32.Checksum(buf, crcTable)}
		})
	}
	wg.Wait()
	err = cmd.Wait()
	<-drained
	if err != nil {
		t.Fatalf("sink: %v\n%s", err, stderr.String())
	}
	var rep sink.SinkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("sink report: %v\n%s", err, stdout.String())
	}
	var total int
	for _, c := range clients {
		total += c.bytes
	}
	if rep.Command != "sink" || rep.Runner == "" || rep.Sources != len(clients) || rep.Bytes != uint64(total) || rep.StopReason != "idle" {
		t.Errorf("report: command %q runner %q sources %d bytes %d (want %d) stop %q", rep.Command, rep.Runner, rep.Sources, rep.Bytes, total, rep.StopReason)
	}
	if rep.ThroughputBps <= 0 || rep.CPUSPerGiB <= 0 || rep.ThreadsMax < 1 || rep.RSSMaxBytes <= 0 || rep.FairnessJain <= 0 || rep.FairnessJain > 1 {
		t.Errorf("report figures: %+v", rep)
	}
	byPeer := map[string]sink.SinkStream{}
	for _, s := range rep.Streams {
		byPeer[s.Peer] = s
	}
	for _, c := range clients {
		s, ok := byPeer[c.local]
		if !ok {
			t.Errorf("no stream for peer %s in %+v", c.local, rep.Streams)
			continue
		}
		if s.Bytes != uint64(c.bytes) || s.CRC32C != fmt.Sprintf("%08x", c.crc) || s.Errors != 0 {
			t.Errorf("peer %s: got %d bytes crc %s errors %d, sent %d bytes crc %08x", c.local, s.Bytes, s.CRC32C, s.Errors, c.bytes, c.crc)
		}
	}
}

func testCLIProbe(t *testing.T, bin string) {
	stdout, stderr, status := benchtest.RunCLI(t, bin, "probe", "--json", "-")
	if status != 0 {
		t.Fatalf("probe: exit %d: %s", status, stderr)
	}
	if !strings.Contains(stdout, "io_uring: ") || !strings.Contains(stdout, "auto picks: ") {
		t.Errorf("probe output:\n%s", stdout)
	}
	i := strings.Index(stdout, "\n{")
	if i < 0 {
		t.Fatalf("no JSON in probe output:\n%s", stdout)
	}
	// the fields of probe.ProbeReport this test reads
	var rep struct {
		IOURing   string `json:"io_uring"`
		Auto      string `json:"auto"`
		Decisions []struct {
			Message string            `json:"message"`
			Attrs   map[string]string `json:"attrs"`
		} `json:"decisions"`
		Runners []json.RawMessage `json:"runners"`
	}
	if err := json.Unmarshal([]byte(stdout[i+1:]), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Auto == "" || rep.IOURing == "" || len(rep.Runners) != 4 || len(rep.Decisions) == 0 {
		t.Errorf("probe report: %+v", rep)
	}
	if last := rep.Decisions[len(rep.Decisions)-1]; last.Message != "runner chosen" || last.Attrs["runner"] != rep.Auto {
		t.Errorf("last decision %+v, want runner chosen: %s", last, rep.Auto)
	}
}

func testCLIUsage(t *testing.T, bin string) {
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"run", "--sources", "many"}, 2, "-sources"},
		{[]string{"run", "--rounds", "0"}, 2, "--rounds"},
		{[]string{"run", "--target", "speed>=1"}, 2, "-target"},
		{[]string{"sink", "--ports", "0"}, 2, "--ports"},
		{[]string{"latency", "--loads", "fast"}, 2, "-loads"},
		{[]string{"file", "--files", "/nonexistent/x"}, 2, "--files"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"run", "--help"}, 0, "-msg-size"},
		{[]string{"sink", "--help"}, 0, "-until-idle"},
		{[]string{"run", "--framing", "json"}, 2, "--framing"},
		{[]string{"sink", "--framing", "length:3le"}, 2, "--framing"},
		{[]string{"run", "--framing", "length:1be", "--msg-size", "1KiB"}, 2, "--framing"},
		{[]string{"run", "--help"}, 0, "without timestamps"},
		{[]string{"sink", "--help"}, 0, "-framing"},
		{[]string{"run", "--tls", "--rate", "1MiB/s"}, 2, "--tls: unpaced runs only"},
		{[]string{"run", "--tls", "--client", "fio"}, 2, "--tls: with the built-in generator only"},
		{[]string{"run", "--help"}, 0, "-tls"},
	} {
		stdout, stderr, status := benchtest.RunCLI(t, bin, tc.args...)
		if status != tc.status || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("%v: exit %d (want %d), output lacks %q:\n%s%s", tc.args, status, tc.status, tc.want, stdout, stderr)
		}
	}
}

// framedClient is one connection of the framed sink test: what it sent,
// and what the sink must deliver of it.
type framedClient struct {
	local     string
	bytes     int // delivered: sent less the skipped line
	crc       uint32
	records   int
	skipped   int
	truncated int
}

// sinkFraming is a framing the framed sink test drives: how a record of a
// payload is written, and whether a record too long for it ends the
// connection (length prefixes) rather than being skipped.
type sinkFraming struct {
	spec   string
	encode func(payload []byte) []byte
	ends   bool
}

var sinkFramings = []sinkFraming{
	{"newline:100", func(p []byte) []byte { return append(append([]byte(nil), p...), '\n') }, false},
	{"octet:100", func(p []byte) []byte { return append([]byte(fmt.Sprintf("%d ", len(p))), p...) }, false},
	{"length:2be:100", func(p []byte) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(p))), p...) }, true},
	{"mqtt:100", func(p []byte) []byte {
		// A PUBLISH's fixed header, then the rest: the framer reads no further.
		h := []byte{0x30}
		for n := len(p); ; n >>= 7 {
			if n < 0x80 {
				h = append(h, byte(n))
				break
			}
			h = append(h, byte(n&0x7f)|0x80)
		}
		return append(h, p...)
	}, true},
}

// testCLISinkFramed runs testCLISinkFraming for every framer that reads
// on after a bad record, and for one that ends the connection there.
func testCLISinkFramed(t *testing.T, bin string) {
	for _, fr := range sinkFramings {
		t.Run(fr.spec, func(t *testing.T) { testCLISinkFraming(t, bin, fr) })
	}
}

// testCLISinkFraming feeds `sink --framing SPEC` records of up to 100
// bytes written in pieces that split them anywhere, one connection with a
// record above the maximum and an unfinished last record, and checks the
// report's records, skips, truncated bytes and checksums, per stream and
// in total: the totals are the sums of the streams. Every connection stays
// open until all have written, so the peer address names one stream.
func testCLISinkFraming(t *testing.T, bin string, fr sinkFraming) {
	const maxRec = 100
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "sink", "--listen", "127.0.0.1:0", "--runner", "auto", "--framing", fr.spec,
		"--until-idle", "300ms", "--json", "-", "--pool", "64", "--buf", "16KiB", "--flush", "-1ns")
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	addr := ""
	re := regexp.MustCompile(`^sluice-bench sink: listening on (\S+) \(runner \w+, framing ` + regexp.QuoteMeta(fr.spec) + `\)`)
	var stderr strings.Builder
	for sc.Scan() {
		stderr.WriteString(sc.Text() + "\n")
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			addr = strings.TrimSuffix(m[1], ",")
			break
		}
	}
	if addr == "" {
		cmd.Wait()
		t.Fatalf("sink never said it was listening with framing:\n%s", stderr.String())
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
		}
	}()

	clients := make([]framedClient, 4)
	var wrote, wg sync.WaitGroup
	wrote.Add(len(clients))
	for i := range clients {
		wg.Go(func() {
			written := sync.OnceFunc(wrote.Done)
			defer written()
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			payload := func(n int) []byte {
				b := make([]byte, n)
				for j := range b {
					b[j] = 'a' + byte(rng.IntN(26))
				}
				return b
			}
			var sent, want []byte
			bad := -1 // where a record that ends the connection starts
			fc := framedClient{}
			n := 200 + 100*i
			for k := range n {
				if i == 3 && (k == 50 && !fr.ends || k == n-1 && fr.ends) {
					// Too long: skipped and reading goes on, or the
					// connection ends here.
					if fr.ends {
						bad = len(sent)
					}
					sent = append(sent, fr.encode(payload(3*maxRec))...)
					fc.skipped++
					if fr.ends {
						break
					}
					continue
				}
				r := fr.encode(payload(1 + rng.IntN(maxRec))) // octet counting has no empty record
				want = append(want, r...)
				sent = append(sent, r...)
				fc.records++
			}
			if i == 2 {
				tail := fr.encode(payload(maxRec))[:40] // a record the client never ends
				sent, want = append(sent, tail...), append(want, tail...)
				fc.truncated = len(tail)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			// Pieces of 1 to 61 bytes split records anywhere; a pause
			// now and then lets the engine read them apart.
			for p := sent; len(p) > 0; {
				n := min(1+rng.IntN(61), len(p))
				if _, err := c.Write(p[:n]); err != nil {
					if bad < 0 || len(sent)-len(p) < bad {
						t.Error(err)
						return
					}
					break // the sink ended the connection at the bad record
				}
				p = p[n:]
				if rng.IntN(8) == 0 {
					time.Sleep(200 * time.Microsecond)
				}
			}
			fc.local, fc.bytes, fc.crc = c.LocalAddr().String(), len(want), crc32.Checksum(want, crcTable)
			clients[i] = fc
			written()
			wrote.Wait()
		})
	}
	wg.Wait()
	err = cmd.Wait()
	<-drained
	if err != nil {
		t.Fatalf("sink: %v\n%s", err, stderr.String())
	}
	var rep sink.SinkReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("sink report: %v\n%s", err, stdout.String())
	}
	var total, records, skipped, truncated int
	for _, c := range clients {
		total += c.bytes
		records += c.records
		skipped += c.skipped
		truncated += c.truncated
	}
	if rep.Framing != fr.spec || rep.Sources != len(clients) || rep.Bytes != uint64(total) || rep.Records != uint64(records) ||
		rep.Skipped != uint64(skipped) || rep.Truncated != uint64(truncated) || rep.RecordsPerS <= 0 {
		t.Errorf("report: framing %q sources %d bytes %d records %d (%.0f/s) skipped %d truncated %d; want %d sources %d bytes %d records %d skipped %d truncated",
			rep.Framing, rep.Sources, rep.Bytes, rep.Records, rep.RecordsPerS, rep.Skipped, rep.Truncated, len(clients), total, records, skipped, truncated)
	}
	if !strings.Contains(stderr.String(), humanize.Comma(int64(records))+" records (") {
		t.Errorf("the summary line does not count the records:\n%s", stderr.String())
	}
	var sum sink.SinkStream
	byPeer := map[string]sink.SinkStream{}
	sources := map[uint64]bool{}
	for _, s := range rep.Streams {
		if sources[s.Source] {
			t.Errorf("source %d is in the report twice", s.Source)
		}
		sources[s.Source] = true
		if _, dup := byPeer[s.Peer]; dup {
			t.Errorf("peer %s names two streams, though every connection stayed open until all had written", s.Peer)
		}
		byPeer[s.Peer] = s
		sum.Bytes += s.Bytes
		sum.Records += s.Records
		sum.RecordsSkipped += s.RecordsSkipped
		sum.TruncatedBytes += s.TruncatedBytes
	}
	if sum.Bytes != rep.Bytes || sum.Records != rep.Records || sum.RecordsSkipped != rep.Skipped || sum.TruncatedBytes != rep.Truncated {
		t.Errorf("the report's totals (bytes %d records %d skipped %d truncated %d) are not the sums of its streams (%d %d %d %d)",
			rep.Bytes, rep.Records, rep.Skipped, rep.Truncated, sum.Bytes, sum.Records, sum.RecordsSkipped, sum.TruncatedBytes)
	}
	for _, c := range clients {
		s := byPeer[c.local]
		if s.Bytes != uint64(c.bytes) || s.CRC32C != fmt.Sprintf("%08x", c.crc) || s.Records != uint64(c.records) ||
			s.RecordsSkipped != uint64(c.skipped) || s.TruncatedBytes != uint64(c.truncated) || s.Errors != uint64(c.skipped) {
			t.Errorf("peer %s: got %+v; want %d bytes crc %08x %d records %d skipped %d truncated bytes", c.local, s, c.bytes, c.crc, c.records, c.skipped, c.truncated)
		}
	}
}

// testCLIRunFramed runs `run --framing` with two runners, for a
// delimiter and a length prefix, and checks that every byte sent arrived
// as whole records, verified, with no latency claimed.
func testCLIRunFramed(t *testing.T, bin string) {
	avail, _ := bench.AvailableRunners([]string{"uring", "goroutine"})
	const msgSize = 1000
	for _, framing := range []string{"newline", "length:4le"} {
		t.Run(framing, func(t *testing.T) {
			jsonPath := filepath.Join(t.TempDir(), "run.json")
			stdout, stderr, status := benchtest.RunCLI(t, bin, "run", "--runners", strings.Join(avail, ","), "--sources", "2",
				"--duration", "1s", "--msg-size", strconv.Itoa(msgSize), "--framing", framing, "--json", jsonPath)
			if status != 0 {
				t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
			}
			if !strings.Contains(stdout, "records/s") || !strings.Contains(stdout, "note: latency not measured") {
				t.Errorf("the table has no records or no note on latency:\n%s", stdout)
			}
			raw, err := os.ReadFile(jsonPath)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				OK     bool           `json:"ok"`
				Config map[string]any `json:"config"`
				Notes  []string       `json:"notes"`
				Runs   []struct {
					Runner         string         `json:"runner"`
					Bytes          uint64         `json:"bytes"`
					GenSentBytes   uint64         `json:"gen_sent_bytes"`
					Records        uint64         `json:"records"`
					RecordsPerS    float64        `json:"records_per_s"`
					RecordsSkipped uint64         `json:"records_skipped"`
					TruncatedBytes uint64         `json:"truncated_bytes"`
					Verified       bool           `json:"verified"`
					Latency        report.Latency `json:"latency_ns"`
				} `json:"runs"`
			}
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.Config["framing"] != framing || len(rep.Notes) == 0 || len(rep.Runs) != len(avail) {
				t.Fatalf("report: ok %v framing %v notes %q runs %d", rep.OK, rep.Config["framing"], rep.Notes, len(rep.Runs))
			}
			for _, r := range rep.Runs {
				if r.Bytes == 0 || r.Bytes != r.GenSentBytes || r.Bytes%msgSize != 0 || r.Records != r.Bytes/msgSize ||
					r.RecordsPerS <= 0 || r.RecordsSkipped != 0 || r.TruncatedBytes != 0 || !r.Verified {
					t.Errorf("%s: %+v: want every byte sent in whole %d-byte records, verified", r.Runner, r, msgSize)
				}
				if r.Latency.Count != 0 {
					t.Errorf("%s: latency %+v from records without timestamps", r.Runner, r.Latency)
				}
			}
		})
	}
}

// testCLIRunTLS runs --tls briefly: the TLS row comes first with its
// ratios to the plaintext rows, and its bytes reconcile with the
// generator's, stream by stream, CRC-32C included.
func testCLIRunTLS(t *testing.T, bin string) {
	const sources = 3
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	stdout, stderr, status := benchtest.RunCLI(t, bin, "run", "--tls", "--runners", "goroutine", "--sources", strconv.Itoa(sources),
		"--duration", "1s", "--msg-size", "64KiB", "--json", jsonPath)
	if status != 0 {
		t.Fatalf("run --tls: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	if !regexp.MustCompile(`(?m)^\s*`+regexp.QuoteMeta(RowTLS)+`\s+\d`).MatchString(stdout) ||
		!strings.Contains(stdout, RowTLS+"/goroutine: ") || !strings.Contains(stdout, "x CPU-s/GiB") {
		t.Errorf("no TLS row or no TLS/plaintext ratio:\n%s", stdout)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		OK     bool           `json:"ok"`
		Config map[string]any `json:"config"`
		Runs   []struct {
			Runner          string  `json:"runner"`
			Sources         int     `json:"sources"`
			Bytes           uint64  `json:"bytes"`
			GenSentBytes    uint64  `json:"gen_sent_bytes"`
			CPUSPerGiB      float64 `json:"cpu_s_per_gib"`
			TLS             string  `json:"tls"`
			StreamsVerified int     `json:"streams_verified"`
			Verified        bool    `json:"verified"`
		} `json:"runs"`
		Ratios []struct {
			A      string `json:"a"`
			B      string `json:"b"`
			Ratios []struct {
				Metric string  `json:"metric"`
				Median float64 `json:"median"`
			} `json:"ratios"`
		} `json:"ratios"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Config["tls"] != true || rep.Config["verify"] != true || len(rep.Runs) != 2 || rep.Runs[0].Runner != RowTLS {
		t.Fatalf("report: ok %v config %v runs %+v", rep.OK, rep.Config, rep.Runs)
	}
	for _, r := range rep.Runs {
		if r.Bytes == 0 || r.Bytes != r.GenSentBytes || r.StreamsVerified != sources || !r.Verified || r.CPUSPerGiB <= 0 {
			t.Errorf("%s: %+v: want every byte sent received, %d streams' bytes and CRC-32C reconciled", r.Runner, r, sources)
		}
	}
	if tls := rep.Runs[0].TLS; !strings.HasPrefix(tls, "TLS 1.3 TLS_AES_") {
		t.Errorf("TLS row's sessions: %q", tls)
	}
	if rep.Runs[1].TLS != "" {
		t.Errorf("plaintext row with TLS sessions: %q", rep.Runs[1].TLS)
	}
	found := false
	for _, c := range rep.Ratios {
		if c.A != RowTLS || c.B != "goroutine" {
			continue
		}
		for _, m := range c.Ratios {
			found = found || (m.Metric == "cpu_s_per_gib" && m.Median > 0)
		}
	}
	if !found {
		t.Errorf("no %s/goroutine CPU-s/GiB ratio in %+v", RowTLS, rep.Ratios)
	}
}
