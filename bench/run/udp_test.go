package run

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/sink"
)

// udpRunConfig is a valid `run --proto udp`.
func udpRunConfig() RunConfig {
	c := DefaultRunConfig()
	c.Proto, c.Client, c.Sources, c.MsgSize = load.ProtoUDP, load.ClientFio, 4, 512
	return c
}

func TestRunConfigUDP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*RunConfig)
		wantErr string
	}{
		{"valid", func(*RunConfig) {}, ""},
		{"8KiB", func(c *RunConfig) { c.MsgSize = 8 << 10 }, ""},
		{"sweep", func(c *RunConfig) { c.UDPRates = DatagramRates{1e5, 2e5, 3e5} }, ""},
		{"peers", func(c *RunConfig) { c.Peers = report.StringList{peers.Go, peers.Gnet} }, ""},
		{"unknown proto", func(c *RunConfig) { c.Proto = "sctp" }, "--proto"},
		{"generator", func(c *RunConfig) { c.Client = load.ClientGen }, ""},
		{"generator, many senders", func(c *RunConfig) { c.Client, c.Sources = load.ClientGen, 5000 }, ""},
		{"generator, too many senders", func(c *RunConfig) { c.Client, c.Sources = load.ClientGen, 20000 }, "--sources"},
		{"fio, many senders", func(c *RunConfig) { c.Sources = 5000 }, "--sources"},
		{"generator, uniform", func(c *RunConfig) { c.Client, c.Arrivals = load.ClientGen, load.ArrivalsUniform }, "--arrivals"},
		{"generator, skew", func(c *RunConfig) { c.Client, c.Skew = load.ClientGen, 0.2 }, "--skew"},
		{"unknown client", func(c *RunConfig) { c.Client = "iperf" }, "--client"},
		{"empty datagram", func(c *RunConfig) { c.MsgSize = 0 }, "--msg-size"},
		{"datagram too large", func(c *RunConfig) { c.MsgSize = 65508 }, "--msg-size"},
		{"datagram over the buffer", func(c *RunConfig) { c.MsgSize, c.Engine.Buf = 8<<10, 8<<10 }, "--msg-size"},
		{"default sources", func(c *RunConfig) { c.Sources = load.DefaultRunSources }, "--sources"},
		{"no sources", func(c *RunConfig) { c.Sources = 0 }, "--sources"},
		{"byte rate", func(c *RunConfig) { c.Rate = 1 << 20 }, "--rate"},
		{"falling sweep", func(c *RunConfig) { c.UDPRates = DatagramRates{2e5, 1e5} }, "--udp-rate"},
		{"repeated rate", func(c *RunConfig) { c.UDPRates = DatagramRates{1e5, 1e5} }, "--udp-rate"},
		{"rate under a byte per job", func(c *RunConfig) { c.UDPRates = DatagramRates{0.001} }, "--udp-rate"},
		{"framing", func(c *RunConfig) { c.Engine.Framing = "newline" }, "--framing"},
		{"tls", func(c *RunConfig) { c.TLS = true }, "--tls"},
		{"iperf3", func(c *RunConfig) { c.IPerf3 = true }, "--iperf3"},
		{"in process", func(c *RunConfig) { c.InProcess = true }, "--in-process"},
		{"target", func(c *RunConfig) { c.Targets = bench.TargetList{{Metric: "throughput", Op: ">=", Bound: 1}} }, "--target"},
		{"plot", func(c *RunConfig) { c.Plot = "out" }, "--plot"},
		{"profile", func(c *RunConfig) { c.Profile = "out" }, "--profile"},
		{"negative buffer", func(c *RunConfig) { c.UDPReadBuffer = -1 }, "--udp-read-buffer"},
		{"huge buffer", func(c *RunConfig) { c.UDPReadBuffer = 2 << 30 }, "--udp-read-buffer"},
		{"loss of one", func(c *RunConfig) { c.UDPMaxLoss = 1 }, "--udp-max-loss"},
		{"negative loss", func(c *RunConfig) { c.UDPMaxLoss = -0.1 }, "--udp-max-loss"},
		{"gen pacing", func(c *RunConfig) { c.GenPacing = "burst" }, "--gen-pacing"},
		{"skew", func(c *RunConfig) { c.Skew = 0.2 }, "--skew"},
		{"bad runner", func(c *RunConfig) { c.Runners = report.StringList{"kqueue"} }, "--runners"},
		{"bad peer", func(c *RunConfig) { c.Peers = report.StringList{"netty"} }, "--peers"},
		{"epoll peer", func(c *RunConfig) { c.Peers = report.StringList{"go", "epoll"} }, "--peers epoll"},
		{"tcp with a datagram rate", func(c *RunConfig) {
			c.Proto, c.Client, c.Sources, c.UDPRates = load.ProtoTCP, load.ClientGen, 8, DatagramRates{1e5}
		}, "--udp-rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := udpRunConfig()
			tc.edit(&c)
			err := c.Validate()
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.HasPrefix(err.Error(), tc.wantErr)) {
				t.Errorf("Validate: %v, want an error starting %q", err, tc.wantErr)
			}
		})
	}
}

func TestSinkConfigUDP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*sink.SinkConfig)
		wantErr string
	}{
		{"valid", func(*sink.SinkConfig) {}, ""},
		{"tcp", func(c *sink.SinkConfig) { c.Proto, c.DatagramSize = load.ProtoTCP, 0 }, ""},
		{"tcp with a datagram size", func(c *sink.SinkConfig) { c.Proto = load.ProtoTCP }, "--datagram-size"},
		{"unknown proto", func(c *sink.SinkConfig) { c.Proto = "quic" }, "--proto"},
		{"no datagram size", func(c *sink.SinkConfig) { c.DatagramSize = 0 }, "--datagram-size"},
		{"datagram too large", func(c *sink.SinkConfig) { c.DatagramSize = 70000 }, "--datagram-size"},
		{"negative buffer", func(c *sink.SinkConfig) { c.UDPReadBuffer = -1 }, "--udp-read-buffer"},
		{"ports", func(c *sink.SinkConfig) { c.Listen, c.Ports = "127.0.0.1:9000", 4 }, "--ports"},
		{"framing", func(c *sink.SinkConfig) { c.Engine.Framing = "newline" }, "--framing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sink.DefaultSinkConfig()
			c.Proto, c.DatagramSize = load.ProtoUDP, 512
			tc.edit(&c)
			err := c.Validate()
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.HasPrefix(err.Error(), tc.wantErr)) {
				t.Errorf("Validate: %v, want an error starting %q", err, tc.wantErr)
			}
		})
	}
}

// TestUDPFlags parses the UDP flags as the CLI does.
func TestUDPFlags(t *testing.T) {
	c := DefaultRunConfig()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--proto", "udp", "--client", "fio", "--sources", "4", "--msg-size", "128",
		"--udp-rate", "100k,250000,1M", "--udp-read-buffer", "8MiB", "--udp-max-loss", "0.01"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := (DatagramRates{1e5, 2.5e5, 1e6}); c.UDPRates.String() != want.String() {
		t.Errorf("--udp-rate: %v, want %v", c.UDPRates.String(), want.String())
	}
	if c.UDPReadBuffer != 8<<20 || c.UDPMaxLoss != 0.01 || c.MsgSize != 128 {
		t.Errorf("read buffer %d, max loss %v, msg size %d", c.UDPReadBuffer, c.UDPMaxLoss, c.MsgSize)
	}
	for _, bad := range []string{"0", "-5", "fast", "100k,,200k", "1G"} {
		var r DatagramRates
		if err := r.Set(bad); err == nil {
			t.Errorf("--udp-rate %q: no error", bad)
		}
	}
}

func TestFioUDPJobFile(t *testing.T) {
	c := udpRunConfig()
	c.Duration = 2 * time.Second
	f := udpJob("169.254.77.1:9514", c, 200000, []int{1}).File()
	// 200,000 datagrams/s of 512 bytes over 4 jobs: 25,600,000 bytes/s each.
	for _, want := range []string{"protocol=udp\n", "hostname=169.254.77.1\n", "port=9514\n", "bs=512\n", "rate=25600000\n",
		"rate_process=poisson\n", "runtime=2000ms\n", "cpus_allowed=1\n", "[s1]\n[s2]\n[s3]\n[s4]\n"} {
		if !strings.Contains(f, want) {
			t.Errorf("job file lacks %q:\n%s", want, f)
		}
	}
	if strings.Contains(f, "nodelay") || strings.Contains(f, "protocol=tcp") {
		t.Errorf("a UDP job file with TCP options:\n%s", f)
	}
	if f := udpJob("169.254.77.1:9514", c, 0, nil).File(); strings.Contains(f, "rate=") {
		t.Errorf("a flat-out job file with a rate:\n%s", f)
	}
}

// TestUDPAccounting checks the row's sums and the mismatches they find.
func TestUDPAccounting(t *testing.T) {
	fio := func(ios ...uint64) udpSent {
		r := &load.FioReport{}
		for _, n := range ios {
			var j load.FioJobReport
			j.JobRuntime = 1000
			j.Write.TotalIOs = n
			r.Jobs = append(r.Jobs, j)
		}
		return fioUDPSent(r)
	}
	gen := func(sent uint64) udpSent { return genUDPSent(&load.UDPGenReport{Sent: sent, Errors: 3, Secs: 1}) }
	for _, tc := range []struct {
		name     string
		sink     sink.UDPSinkReport
		load     udpSent
		mib      harness.UDPMIB
		veth     bool
		wantLost uint64
		wantBUDP int64
		wantBad  string // a mismatch holding this, or none
	}{
		{"all delivered", sink.UDPSinkReport{Datagrams: 2000, Others: 4}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 2004}, true, 0, 0, ""},
		{"socket drops", sink.UDPSinkReport{Datagrams: 1900, Others: 4, Drops: 100}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 1904, InErrors: 100, RcvbufErrors: 100}, true, 100, 0, ""},
		{"lost before UDP", sink.UDPSinkReport{Datagrams: 1990, Others: 4}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 1994}, true, 10, 10, ""},
		{"a close message dropped", sink.UDPSinkReport{Datagrams: 2000, Others: 3, Drops: 1}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 2003, InErrors: 1, RcvbufErrors: 1}, true, 0, 0, ""},
		{"more than sent", sink.UDPSinkReport{Datagrams: 2001, Others: 4}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 2005}, true, 0, -1, "the load sent 2000"},
		{"drops disagree", sink.UDPSinkReport{Datagrams: 1900, Others: 4, Drops: 50}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 1904, InErrors: 100, RcvbufErrors: 100}, true, 100, 0, "InErrors 100"},
		{"received disagrees", sink.UDPSinkReport{Datagrams: 1900, Others: 4}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 2004}, true, 100, 0, "InDatagrams 2004"},
		{"drops unknown", sink.UDPSinkReport{Datagrams: 1900, Others: 4, Drops: -1}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 1904, InErrors: 100}, true, 100, 0, ""},
		{"loopback: counters not compared", sink.UDPSinkReport{Datagrams: 1900, Others: 4, Drops: 100}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 123456, InErrors: 7}, false, 100, -1, ""},
		{"the generator: no small messages", sink.UDPSinkReport{Datagrams: 1990, Drops: 10}, gen(2000),
			harness.UDPMIB{InDatagrams: 1990, InErrors: 10, RcvbufErrors: 10}, true, 10, 0, ""},
		{"the generator: others are a mismatch", sink.UDPSinkReport{Datagrams: 2000, Others: 1}, gen(2000),
			harness.UDPMIB{InDatagrams: 2001}, true, 0, -1, "0 small messages"},
		{"a fio job's error", sink.UDPSinkReport{Datagrams: 2000, Others: 4}, func() udpSent {
			s := fio(1000, 1000)
			s.Errors = []string{"fio job s2: error 5"}
			return s
		}(), harness.UDPMIB{InDatagrams: 2004}, true, 0, 0, "error 5"},
		{"sink errors", sink.UDPSinkReport{Datagrams: 2000, Others: 4, Errors: 1, ErrorSamples: []string{"malformed"}}, fio(1000, 1000),
			harness.UDPMIB{InDatagrams: 2004}, true, 0, 0, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := udpResult("uring", 0, 0, 512, &tc.sink, tc.load, tc.mib, tc.veth)
			if r.Offered != 2000 || r.Lost != tc.wantLost || r.BeforeUDP != tc.wantBUDP {
				t.Errorf("offered %d, lost %d, before UDP %d; want 2000, %d, %d", r.Offered, r.Lost, r.BeforeUDP, tc.wantLost, tc.wantBUDP)
			}
			if got := r.DeliveredFraction + r.LostFraction; r.Delivered <= r.Offered && (got < 0.999999 || got > 1.000001) {
				t.Errorf("delivered %v and lost %v fractions do not add up to 1", r.DeliveredFraction, r.LostFraction)
			}
			bad := strings.Join(r.Mismatches, "; ")
			if tc.wantBad == "" && !r.Verified || tc.wantBad != "" && (r.Verified || !strings.Contains(bad, tc.wantBad)) {
				t.Errorf("verified %v, mismatches %q; want one holding %q", r.Verified, bad, tc.wantBad)
			}
		})
	}
}

func TestUDPSweepStep(t *testing.T) {
	at := func(rate, offered, lost float64) UDPSummary {
		return UDPSummary{RateDps: rate, OfferedDps: bench.RatioSpread{Median: offered}, Lost: bench.RatioSpread{Median: lost}}
	}
	for _, tc := range []struct {
		name  string
		steps []UDPSummary
		want  UDPSustained
	}{
		{"every rate kept", []UDPSummary{at(1e5, 1e5, 0), at(2e5, 1.99e5, 0.0005)},
			UDPSustained{RateDps: 2e5, OfferedDps: 1.99e5}},
		{"lost at the second", []UDPSummary{at(1e5, 1e5, 0), at(2e5, 2e5, 0.02), at(3e5, 3e5, 0)},
			UDPSustained{RateDps: 1e5, OfferedDps: 1e5, FailedAt: 2e5}},
		{"lost at the first", []UDPSummary{at(1e5, 1e5, 0.5)}, UDPSustained{FailedAt: 1e5}},
		{"exactly the mark", []UDPSummary{at(1e5, 1e5, 0.001)}, UDPSustained{RateDps: 1e5, OfferedDps: 1e5}},
		{"fio short of the rate", []UDPSummary{at(1e5, 1e5, 0), at(1e6, 1.8e5, 0)},
			UDPSustained{RateDps: 1e6, OfferedDps: 1.8e5, LoadBound: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u UDPSustained
			for _, s := range tc.steps {
				u.step(s, DefaultUDPMaxLoss)
			}
			if u != tc.want {
				t.Errorf("got %+v, want %+v", u, tc.want)
			}
		})
	}
}
