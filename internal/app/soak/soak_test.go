package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/ring"
)

// EnvSoak sets how long TestSoak soaks, over all its runners together,
// as a Go duration: the short form (60s) runs in every `go test`, and
// SLUICE_SOAK=10m (or `make soak`, which runs the CLI) is the long form.
// EnvSoakRunners picks the runners, comma-separated (default uring,epoll;
// "all" for every one).
const (
	EnvSoak        = "SLUICE_SOAK"
	EnvSoakRunners = "SLUICE_SOAK_RUNNERS"
)

// soakTestConfig is the soak TestSoak runs for d on runner. The race
// detector makes the engine and the load several times slower, so under
// it the load keeps the 5,000-connection peak but replaces fewer
// connections per second (about 2,000 are opened and closed a second,
// against 4,000 without it, on a 2-CPU machine) and sends less.
func soakTestConfig(runner string, d time.Duration) Config {
	c := DefaultConfig()
	c.Runner = runner
	c.Duration = d
	c.Cycle = min(c.Cycle, max(d/2, 4*time.Second))
	c.MQTTRestart = min(c.MQTTRestart, max(d/2, 5*time.Second))
	c.Rotate = min(c.Rotate, max(d/6, time.Second))
	if raceDetector {
		c.Churn = 800
		c.ConnBytes = 32 << 10
		c.UDPRate = 2000
		c.TailRate = 500
		c.MQTTRate = 50
		c.TrustRate = 20
	}
	return c
}

// TestSoak runs the soak (see Run) on uring and epoll, half of
// SLUICE_SOAK (default 60s) each: every stream must arrive exactly, the
// peak of 5,000 concurrent connections must be reached, and every level
// must come back once the load stops. Without mosquitto it soaks without
// MQTT, or fails under SLUICE_REQUIRE_MOSQUITTO=1 (CI).
func TestSoak(t *testing.T) {
	total := 60 * time.Second
	if v := os.Getenv(EnvSoak); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 10m", EnvSoak, v)
		}
		total = d
	}
	runners := []string{engine.RunnerURing, engine.RunnerEpoll}
	if v := os.Getenv(EnvSoakRunners); v == "all" {
		runners = harness.AllRunners()
	} else if v != "" {
		runners = strings.Split(v, ",")
	}
	mqtt := true
	if _, err := mosquitto.Bin(); err != nil {
		if srcstest.Required(srcstest.EnvRequireMosquitto) {
			t.Fatalf("%v, and %s=1", err, srcstest.EnvRequireMosquitto)
		}
		t.Logf("%v: soaking without MQTT (%s=1 fails instead)", err, srcstest.EnvRequireMosquitto)
		mqtt = false
	}
	for _, runner := range runners {
		t.Run(runner, func(t *testing.T) {
			requireSoakRunner(t, runner)
			c := soakTestConfig(runner, total/time.Duration(len(runners)))
			c.MQTT = mqtt
			c.JSON = filepath.Join(t.TempDir(), "soak.json")
			var log bytes.Buffer
			start := time.Now()
			rep, err := Run(context.Background(), c, harness.IO{Out: io.Discard, Err: &syncWriter{w: &log}})
			if err != nil {
				t.Fatalf("soak: %v\n%s", err, log.String())
			}
			checkSoakReport(t, c, rep)
			t.Logf("%s in %v (race %v): %s", runner, time.Since(start).Round(time.Second), raceDetector, soakLine(rep))
			if testing.Verbose() {
				t.Logf("log:\n%s", log.String())
			}
		})
	}
}

// requireSoakRunner skips uring where the kernel lacks io_uring, unless
// SLUICE_REQUIRE_URING=1 says it must be there.
func requireSoakRunner(t *testing.T, runner string) {
	t.Helper()
	if runner != engine.RunnerURing {
		return
	}
	p := ring.Probe()
	srcstest.RequireURing(t, p.Supported, p.Reason)
}

// checkSoakReport checks what Soak's success already implies, from the
// JSON report as written, so that the report says it too.
func checkSoakReport(t *testing.T, c Config, rep *Report) {
	t.Helper()
	raw, err := os.ReadFile(c.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Command string `json:"command"`
		OK      bool   `json:"ok"`
		Runner  string `json:"runner"`
		Conns   struct {
			Opened     uint64 `json:"opened"`
			Closed     uint64 `json:"closed"`
			Verified   uint64 `json:"verified"`
			Unseen     uint64 `json:"aborted_unseen"`
			PeakClient int64  `json:"peak_client"`
			PeakEngine int64  `json:"peak_engine"`
		} `json:"conns"`
		Leaks      []string `json:"leaks"`
		Mismatches []string `json:"mismatches"`
		Samples    []any    `json:"samples"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	switch {
	case got.Command != "soak" || !got.OK || got.Runner != c.Runner:
		t.Fatalf("report: command %q ok %v runner %q", got.Command, got.OK, got.Runner)
	case got.Conns.Opened == 0 || got.Conns.Opened != got.Conns.Closed || got.Conns.Verified+got.Conns.Unseen != got.Conns.Opened:
		t.Fatalf("report: %d connections opened, %d closed, %d verified, %d aborted unseen",
			got.Conns.Opened, got.Conns.Closed, got.Conns.Verified, got.Conns.Unseen)
	case got.Conns.PeakClient < int64(c.PeakConns) || got.Conns.PeakEngine < int64(c.PeakConns):
		t.Fatalf("report: peak %d client, %d engine; want %d", got.Conns.PeakClient, got.Conns.PeakEngine, c.PeakConns)
	case len(got.Leaks) != 0 || len(got.Mismatches) != 0:
		t.Fatalf("report: leaks %v, mismatches %v", got.Leaks, got.Mismatches)
	case len(got.Samples) < int(c.Duration/c.Progress)/2: // a busy machine delays the ticks
		t.Fatalf("report: %d samples over %v", len(got.Samples), c.Duration)
	}
	if c.MQTT && (rep.MQTT.Restarts == 0 || rep.MQTT.Received == 0) {
		t.Fatalf("report: mqtt %+v: the broker was never restarted, or nothing arrived", rep.MQTT)
	}
	if rep.Tail.Renames == 0 || rep.Tail.CopyTruncates == 0 {
		t.Fatalf("report: tail %+v: not rotated both ways", rep.Tail)
	}
	checkSoakTrust(t, c, rep.Trust)
}

// checkSoakTrust checks the trust load's report: every kind of hostile
// peer came, each listener counted them by their reasons as sent, and
// every well-behaved stream was checked.
func checkSoakTrust(t *testing.T, c Config, tr SoakTrust) {
	t.Helper()
	if c.TrustRate == 0 {
		return
	}
	h, tl, pl := tr.Hostile, tr.TLSListener, tr.ProxyListener
	for _, k := range hostileNames {
		if h[k] == 0 {
			t.Errorf("report: trust: no %s peer came: %+v", k, h)
		}
	}
	switch {
	case tl["tls_failed"] != h["plaintext"]+h["garbage"] || tl["handshake_timeout"] != h["silent"]+h["slow"] ||
		tl["cert_rejected"] != h["alien_cert"] || tl["accepted"] != tr.GoodTLS || tl["denied"]+tl["proxy_refused"] != 0:
		t.Errorf("report: trust: the TLS listener counted %v for hostile peers %v and %d good streams", tl, h, tr.GoodTLS)
	case pl["proxy_refused"] != h["forged_proxy"] || pl["accepted"] != tr.GoodProxied+tr.ForgedLate || tr.ForgedLate > h["forged_proxy"]:
		t.Errorf("report: trust: the PROXY listener counted %v for %d forged headers (%d of them late) and %d good streams",
			pl, h["forged_proxy"], tr.ForgedLate, tr.GoodProxied)
	case tr.GoodTLS == 0 || tr.GoodProxied == 0 || tr.GoodVerified != tr.GoodTLS+tr.GoodProxied:
		t.Errorf("report: trust: %d TLS and %d proxied well-behaved streams, %d verified", tr.GoodTLS, tr.GoodProxied, tr.GoodVerified)
	}
}

func soakLine(rep *Report) string {
	c := rep.Conns
	return strings.Join([]string{
		"opened " + itoa(c.Opened), "peak " + itoa(uint64(c.PeakClient)), "opens/s " + itoa(uint64(c.OpenRate)),
		"bytes " + report.FormatBytes(c.Bytes), "udp drops " + itoa(rep.UDP.KernelDrops) + "/" + itoa(rep.UDP.Sent),
		"tail lines " + itoa(rep.Tail.Lines), "mqtt " + itoa(rep.MQTT.Received) + " (" + itoa(rep.MQTT.Restarts) + " restarts)",
		"after the warm-up and the load: RSS " + report.FormatBytes(uint64(rep.Levels.Warm.RSSBytes)) + " -> " + report.FormatBytes(uint64(rep.Levels.End.RSSBytes)) +
			", Go heap and stacks " + report.FormatBytes(uint64(rep.Levels.Warm.GoBytes)) + " -> " + report.FormatBytes(uint64(rep.Levels.End.GoBytes)),
		"threads " + itoa(uint64(rep.Levels.Start.Threads)) + " -> " + itoa(uint64(rep.Levels.End.Threads)),
	}, ", ")
}

func itoa(n uint64) string { return humanize.Comma(int64(n)) }

// syncWriter serialises writes from the soak's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestSoakConfigValidate checks that bad flags fail with the flag's name.
func TestSoakConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for valid
	}{
		{nil, ""},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--runner", "fast"}, "--runner"},
		{[]string{"--peak-conns", "0"}, "--peak-conns"},
		{[]string{"--peak-conns", "100", "--low-conns", "200"}, "--low-conns"},
		{[]string{"--cycle", "10ms"}, "--cycle"},
		{[]string{"--churn", "-1"}, "--churn"},
		{[]string{"--unix-share", "1.5"}, "--unix-share"},
		{[]string{"--udp-rate", "-5"}, "--udp-rate"},
		{[]string{"--rotate", "1ms"}, "--rotate"},
		{[]string{"--mqtt-rate", "0"}, "--mqtt-rate"},
		{[]string{"--mqtt=false", "--mqtt-rate", "0"}, ""},
		{[]string{"--trust-rate", "-1"}, "--trust-rate"},
		{[]string{"--trust-rate", "0"}, ""},
		{[]string{"--mqtt-publishers", "0"}, "--mqtt-publishers"},
		{[]string{"--settle", "10ms"}, "--settle"},
		{[]string{"--pool", "-1"}, "--pool"},
		{[]string{"--conn-bytes", "2GiB"}, "--conn-bytes"},
	} {
		c := DefaultConfig()
		fs := flag.NewFlagSet("soak", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want+":")):
			t.Errorf("%v: got %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestSoakStream checks that the seeded stream does not depend on how it
// is cut into writes, which the prefix check of aborted connections
// relies on.
func TestSoakStream(t *testing.T) {
	const n = 100_003
	whole := make([]byte, n)
	newSoakStream(7, 42).fill(whole)
	cut := make([]byte, 0, n)
	s := newSoakStream(7, 42)
	for i := 1; len(cut) < n; i = i*3%17 + 1 {
		b := make([]byte, min(i, n-len(cut)))
		s.fill(b)
		cut = append(cut, b...)
	}
	if !bytes.Equal(whole, cut) {
		t.Fatal("the stream depends on the write sizes")
	}
	for _, m := range []int64{0, 1, 7, 8, 9, 16 << 10, n} {
		if got, want := soakPrefixCRC(7, 42, m), crc32.Checksum(whole[:m], castagnoli); got != want {
			t.Errorf("prefix %d: crc32c %08x, want %08x", m, got, want)
		}
	}
	if runtime.GOOS == "linux" {
		seen := map[string]bool{}
		for k := range uint64(70_000) {
			ip := soakLocalIP(k).String()
			if seen[ip] {
				t.Fatalf("connection %d: address %s taken", k, ip)
			}
			seen[ip] = true
		}
	}
}
