package soak

// The soak puts one engine, in this process, under every kind of source at
// once for a long time, and checks two things: that every byte of every
// stream arrived exactly (or, where the kernel may legitimately drop
// bytes, a rule that is still exact: see connEnd and the checkers), and
// that nothing it used stays behind when the load stops. It is built to
// find what a benchmark never runs long enough to show: a descriptor or
// goroutine kept per closed connection, a lane never removed, a buffer
// never released, a reset that loses the bytes before it.
//
// Everything runs in one process so that the levels it watches (open
// descriptors, goroutines, OS threads, resident memory, pool buffers in
// use, live sources and lanes) are the engine's plus a load whose own
// share is zero when it stops. The load is:
//
//   - TCP and unix stream connections (streamLoad, soak_conns.go), opened
//     and closed thousands of times a second in a wave between --low-conns
//     and --peak-conns concurrent connections. Each writes a random amount
//     of seeded bytes in random write sizes and ends in one of four ways.
//     Each connection binds a local address of its own (a fresh 127.x.y.z
//     for TCP, a fresh abstract name for unix), which is the name the
//     engine gives its chunks, so the checker pairs the client's record of
//     what it wrote with the engine's record of what it delivered.
//   - UDP senders (udpLoad, soak_udp.go) whose datagrams carry their
//     sender, sequence number, length and CRC-32C.
//   - A tailed file (tailLoad, soak_tail.go) written with numbered lines
//     and rotated by rename and by copytruncate while being written.
//   - MQTT publishers through a mosquitto broker that is killed and
//     restarted (mqttLoad, soak_mqtt.go), into a QoS 1 subscriber with a
//     kept session.
//
// Levels are sampled every second and printed. A warm-up first opens
// connections up to the peak and ends them all, so that every table sized
// by the number of connections has its largest size; then the load runs,
// stops and drains, and the counts (descriptors, goroutines, threads,
// buffers, sources, lanes) are compared with their levels before any
// load, and memory with its level after the warm-up (compareLevels).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// Defaults of `soak`.
const (
	DefaultSoakDuration     = 60 * time.Second
	DefaultSoakPeakConns    = 5000
	DefaultSoakChurn        = 2000 // connections replaced per second
	DefaultSoakCycle        = 20 * time.Second
	DefaultSoakConnBytes    = 256 << 10
	DefaultSoakUnixShare    = 0.25
	DefaultSoakUDPRate      = 10000 // datagrams per second
	DefaultSoakTailRate     = 2000  // lines per second
	DefaultSoakRotate       = 5 * time.Second
	DefaultSoakMQTTRate     = 200 // messages per second per publisher
	DefaultSoakMQTTPubs     = 2
	DefaultSoakMQTTRestart  = 20 * time.Second
	DefaultSoakSettle       = 60 * time.Second
	DefaultSoakProgressTick = time.Second
)

// Config configures a soak (the sluice-soak command).
type Config struct {
	Duration time.Duration // how long the load runs
	Runner   string
	Engine   harness.EngineFlags
	// PeakConns and LowConns bound the wave of concurrent stream
	// connections; LowConns 0 means a fifth of PeakConns. Cycle is the
	// wave's period (up, hold at the top, down, hold at the bottom).
	PeakConns int
	LowConns  int
	Cycle     time.Duration
	// Churn is how many connections are closed and replaced per second
	// on top of the wave's own openings and closings.
	Churn float64
	// ConnBytes bounds what one connection writes (log-uniform, and a
	// tenth of them write nothing). UnixShare is the fraction of
	// connections made over the unix socket.
	ConnBytes report.Size
	UnixShare float64
	// UDPRate is datagrams per second over all senders; 0 turns UDP off.
	UDPRate float64
	// TailRate is lines per second written to the tailed file; 0 turns
	// the tail off. Rotate is the time between rotations, which alternate
	// between rename and copytruncate.
	TailRate float64
	Rotate   time.Duration
	// MQTT runs mosquitto, MQTTPubs publishers of MQTTRate messages per
	// second each, and kills and restarts the broker every MQTTRestart.
	MQTT        bool
	MQTTRate    float64
	MQTTPubs    int
	MQTTRestart time.Duration
	// TrustRate is hostile peers per second at a TLS listener and a PROXY
	// listener, beside well-behaved TLS and proxied streams at half that
	// rate (trustLoad, soak_trust.go); 0 turns the trust load off.
	TrustRate float64
	// Settle bounds the wait, after the load stops, for every stream to
	// be delivered and every level to come back.
	Settle time.Duration
	// Seed seeds every random choice; 0 picks one (the report says which).
	Seed uint64
	JSON string // report file; "-" or "" for stdout
	// Progress is the sampling period of the levels and progress lines.
	Progress time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Duration: DefaultSoakDuration, Runner: engine.RunnerAuto, PeakConns: DefaultSoakPeakConns,
		Cycle: DefaultSoakCycle, Churn: DefaultSoakChurn, ConnBytes: DefaultSoakConnBytes, UnixShare: DefaultSoakUnixShare,
		UDPRate: DefaultSoakUDPRate, TailRate: DefaultSoakTailRate, Rotate: DefaultSoakRotate,
		MQTT: true, MQTTRate: DefaultSoakMQTTRate, MQTTPubs: DefaultSoakMQTTPubs, MQTTRestart: DefaultSoakMQTTRestart,
		TrustRate: DefaultSoakTrustRate,
		Settle:    DefaultSoakSettle, JSON: "-", Progress: DefaultSoakProgressTick,
	}
}

// RegisterFlags defines c's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long the load runs")
	fs.StringVar(&c.Runner, "runner", c.Runner, "auto, uring, epoll, goroutine or thread")
	fs.IntVar(&c.PeakConns, "peak-conns", c.PeakConns, "concurrent stream connections at the top of each wave")
	fs.IntVar(&c.LowConns, "low-conns", c.LowConns, "concurrent stream connections at the bottom of each wave (default a fifth of --peak-conns)")
	fs.DurationVar(&c.Cycle, "cycle", c.Cycle, "period of the wave: up, hold at the top once reached, down, hold at the bottom")
	fs.Float64Var(&c.Churn, "churn", c.Churn, "stream connections closed and replaced per second, on top of the wave's")
	fs.Var(&c.ConnBytes, "conn-bytes", "most bytes one connection writes, e.g. 256KiB (log-uniform; a tenth write nothing)")
	fs.Float64Var(&c.UnixShare, "unix-share", c.UnixShare, "fraction of the connections made over the unix socket")
	fs.Float64Var(&c.UDPRate, "udp-rate", c.UDPRate, "UDP datagrams per second (0: no UDP)")
	fs.Float64Var(&c.TailRate, "tail-rate", c.TailRate, "lines per second written to the tailed file (0: no tail)")
	fs.DurationVar(&c.Rotate, "rotate", c.Rotate, "time between rotations of the tailed file, alternately by rename and by copytruncate")
	fs.BoolVar(&c.MQTT, "mqtt", c.MQTT, "publish through a mosquitto broker (Debian's mosquitto) into an MQTT source, killing and restarting the broker")
	fs.Float64Var(&c.MQTTRate, "mqtt-rate", c.MQTTRate, "MQTT messages per second per publisher")
	fs.IntVar(&c.MQTTPubs, "mqtt-publishers", c.MQTTPubs, "MQTT publishers")
	fs.DurationVar(&c.MQTTRestart, "mqtt-restart", c.MQTTRestart, "time between kills of the broker (0: never)")
	fs.Float64Var(&c.TrustRate, "trust-rate", c.TrustRate, "hostile peers per second at a TLS and a PROXY listener (plaintext, garbage, silent and slow handshakes, "+
		"another CA's certificates, forged PROXY headers), beside well-behaved TLS and proxied streams at half that rate (0: none)")
	fs.DurationVar(&c.Settle, "settle", c.Settle, "after the load, how long to wait for every stream to be delivered and every level to come back")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of every random choice (default: a random one, printed)")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	c.Engine.Register(fs)
	c.Engine.RegisterListen(fs)
}

// Validate checks c, naming the flag at fault.
func (c Config) Validate() error {
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("--duration: %v: must be positive", c.Duration)
	case c.Runner != engine.RunnerAuto && !slices.Contains(harness.AllRunners(), c.Runner):
		return fmt.Errorf("--runner: %q: must be auto, uring, epoll, goroutine or thread", c.Runner)
	case c.PeakConns < 1 || c.PeakConns > 1_000_000:
		return fmt.Errorf("--peak-conns: %d: must be from 1 to 1000000", c.PeakConns)
	case c.LowConns < 0 || c.LowConns > c.PeakConns:
		return fmt.Errorf("--low-conns: %d: must be from 0 to --peak-conns (%d)", c.LowConns, c.PeakConns)
	case c.Cycle < 100*time.Millisecond:
		return fmt.Errorf("--cycle: %v: must be at least 100ms", c.Cycle)
	case c.Churn < 0:
		return fmt.Errorf("--churn: %v: must not be negative", c.Churn)
	case c.ConnBytes < 0 || c.ConnBytes > 1<<30:
		return fmt.Errorf("--conn-bytes: %d: must be from 0 to 1GiB", c.ConnBytes)
	case c.UnixShare < 0 || c.UnixShare > 1:
		return fmt.Errorf("--unix-share: %v: must be from 0 to 1", c.UnixShare)
	case c.UDPRate < 0 || c.UDPRate > 1e6:
		return fmt.Errorf("--udp-rate: %v: must be from 0 to 1000000", c.UDPRate)
	case c.TailRate < 0 || c.TailRate > 1e6:
		return fmt.Errorf("--tail-rate: %v: must be from 0 to 1000000", c.TailRate)
	case c.TailRate > 0 && c.Rotate < 100*time.Millisecond:
		return fmt.Errorf("--rotate: %v: must be at least 100ms", c.Rotate)
	case c.MQTT && (c.MQTTRate <= 0 || c.MQTTRate > 1e5):
		return fmt.Errorf("--mqtt-rate: %v: must be above 0 and at most 100000 (or --mqtt=false)", c.MQTTRate)
	case c.MQTT && (c.MQTTPubs < 1 || c.MQTTPubs > 100):
		return fmt.Errorf("--mqtt-publishers: %d: must be from 1 to 100 (or --mqtt=false)", c.MQTTPubs)
	case c.MQTTRestart < 0:
		return fmt.Errorf("--mqtt-restart: %v: must not be negative", c.MQTTRestart)
	case c.TrustRate < 0 || c.TrustRate > 10000:
		return fmt.Errorf("--trust-rate: %v: must be from 0 to 10000", c.TrustRate)
	case c.Settle < time.Second:
		return fmt.Errorf("--settle: %v: must be at least 1s", c.Settle)
	case c.Progress <= 0:
		return fmt.Errorf("soak: Progress: %v: must be positive", c.Progress)
	}
	return c.Engine.Validate()
}

// ErrFailed reports a soak that found a mismatch or a leak. The report
// has already been written when it is returned.
var ErrFailed = errors.New("bench: soak: failed (see the MISMATCH and LEAK lines)")

// soakFDMargin is the descriptors the soak needs besides two per
// connection (the client's and the engine's): the engine, its listeners,
// the tail, the UDP and MQTT sockets, the broker's pipes, the runtime.
const soakFDMargin = 512

// soakRun is one soak: the engine, its sources, the loads and the checker.
type soakRun struct {
	cfg Config
	ios harness.IO
	dir string

	e      *engine.Engine
	chk    *soakChecker
	broker *mosquitto.Broker
	udpSrc *srcs.UDPSource
	tail   *srcs.Tail
	mqtt   *mqtt.MQTT

	tcpAddr, unixAddr string
	trustS            *trustSinks // nil without the trust load
	baseSources       int         // live sources before the stream load
	overflows0        uint64      // TcpExt ListenOverflows before the load
	// The checker's counts after the warm-up, which the report leaves out.
	verified0, unseen0 uint64

	streams *streamLoad
	udp     *udpLoad
	tailW   *tailLoad
	mq      *mqttLoad
	trustL  *trustLoad

	mu      sync.Mutex
	samples []SoakSample
	peak    SoakLevels
}

// Run runs a soak: it sets up the engine and its sources,
// runs the load for Duration (or until ctx ends), stops it, waits for
// every stream to be delivered and checked and for every level to come
// back, then writes the summary on ios.Err and the JSON report. A
// mismatch or a leak makes it return ErrFailed, after the report.
func Run(ctx context.Context, c Config, ios harness.IO) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := soakSupported(); err != nil {
		return nil, err
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()>>1 | 1
	}
	if c.LowConns == 0 {
		c.LowConns = c.PeakConns / 5
	}
	limit, err := raiseFDLimit(uint64(2*c.PeakConns + soakFDMargin))
	if err != nil {
		return nil, fmt.Errorf("bench: soak: --peak-conns %d: %w", c.PeakConns, err)
	}
	var brokerBin string
	if c.MQTT {
		if brokerBin, err = mosquitto.Bin(); err != nil {
			return nil, fmt.Errorf("bench: soak: --mqtt: %v; --mqtt=false soaks without MQTT", err)
		}
	}
	dir, err := os.MkdirTemp("", "sluice-soak-")
	if err != nil {
		return nil, fmt.Errorf("bench: soak: %w", err)
	}
	defer os.RemoveAll(dir)
	wall := time.Now()
	r := &soakRun{cfg: c, ios: ios, dir: dir, chk: newSoakChecker(c.Seed)}
	defer r.teardown()
	if err := r.setup(brokerBin); err != nil {
		return nil, err
	}
	rep := r.run(ctx)
	rep.WallS = time.Since(wall).Seconds()
	rep.Config.FDLimit = limit
	r.summary(rep)
	path := c.JSON
	if path == "" {
		path = "-"
	}
	if err := harness.WriteJSON(path, rep, ios); err != nil {
		return rep, err
	}
	if !rep.OK {
		return rep, ErrFailed
	}
	return rep, nil
}

// setup starts the broker, the engine and the sources that live through
// the whole soak: a TCP and a unix listener, a UDP socket, the tail and
// the MQTT subscriber.
func (r *soakRun) setup(brokerBin string) error {
	c := r.cfg
	if brokerBin != "" {
		b, err := mosquitto.StartWith(brokerBin, r.dir, mqttBrokerConf...)
		if err != nil {
			return fmt.Errorf("bench: soak: %w", err)
		}
		r.broker = b
	}
	log := slog.New(slog.NewTextHandler(r.ios.Err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := c.Engine.Config(c.Runner)
	// The pool's pages are resident from the start: otherwise each buffer
	// first written under the load adds its pages to the resident set,
	// and a load that touches more of the pool than the warm-up did reads
	// as a leak.
	cfg.PrefaultPool = true
	e, err := engine.New(cfg, engine.WithHandler(r.chk.handle), engine.WithErrorHandler(r.chk.onError), engine.WithLogger(log))
	if err != nil {
		return fmt.Errorf("bench: soak: engine: %w", err)
	}
	r.e = e

	tcp, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{Logger: log, RecvBuffer: int(c.Engine.RecvBuffer)})
	if err != nil {
		return fmt.Errorf("bench: soak: %w", err)
	}
	if err := e.AddListener(tcp); err != nil {
		tcp.Close()
		return fmt.Errorf("bench: soak: %w", err)
	}
	r.tcpAddr = tcp.Addr().String()
	nonce := fmt.Sprintf("sluice-soak-%d-%x", os.Getpid(), c.Seed&0xffffff)
	unixLn, err := srcs.ListenUnix("@"+nonce, srcs.ListenerConfig{Logger: log})
	if err != nil {
		return fmt.Errorf("bench: soak: %w", err)
	}
	if err := e.AddListener(unixLn); err != nil {
		unixLn.Close()
		return fmt.Errorf("bench: soak: %w", err)
	}
	r.unixAddr = unixLn.Addr().String()
	if c.TrustRate > 0 {
		if err := r.setupTrust(log); err != nil {
			return err
		}
	}

	if c.UDPRate > 0 {
		u, err := srcs.ListenUDP(srcs.UDPConfig{Addr: "127.0.0.1:0", MaxDatagram: udpMaxDatagram})
		if err != nil {
			return fmt.Errorf("bench: soak: %w", err)
		}
		r.udpSrc = u
		r.chk.udp = newUDPCheck(u.Name(), udpSenders)
		if err := r.add(u); err != nil {
			return err
		}
	}
	if c.TailRate > 0 {
		path := filepath.Join(r.dir, "soak.log")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			return fmt.Errorf("bench: soak: %w", err)
		}
		t, err := srcs.NewTail(srcs.TailConfig{Path: path, FromStart: true, Logger: log})
		if err != nil {
			return fmt.Errorf("bench: soak: %w", err)
		}
		r.tail = t
		r.chk.tail = newTailCheck(path)
		if err := r.add(t, engine.WithFraming(srcs.Newline{Max: tailMaxLine})); err != nil {
			return err
		}
	}
	if r.broker != nil {
		m, err := mqtt.NewMQTT(mqtt.MQTTConfig{
			Broker: r.broker.Addr, ClientID: "sluice-soak-sub", Topics: []string{mqttSoakTopic + "/#"}, QoS: 1,
			DialTimeout: 2 * time.Second, KeepAlive: 10 * time.Second,
			Backoff: srcs.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond},
		})
		if err != nil {
			return fmt.Errorf("bench: soak: %w", err)
		}
		r.mqtt = m
		r.chk.mqtt = newMQTTCheck(m.Name(), c.MQTTPubs)
		if err := r.add(m); err != nil {
			return err
		}
		if !waitFor(10*time.Second, func() bool { return m.Stats().Subscribes >= 1 }) {
			return fmt.Errorf("bench: soak: the MQTT source never subscribed at %s", r.broker.Addr)
		}
	}
	return nil
}

// add registers a source the checker already knows by name.
func (r *soakRun) add(src srcs.Source, opts ...engine.SourceOption) error {
	if _, err := r.e.AddSource(src, opts...); err != nil {
		src.Close()
		return fmt.Errorf("bench: soak: %s: %w", src.Name(), err)
	}
	return nil
}

// stopLoad stops every load that was started; each stop is idempotent.
func (r *soakRun) stopLoad() {
	if r.streams != nil {
		r.streams.stop()
	}
	if r.udp != nil {
		r.udp.stop()
	}
	if r.tailW != nil {
		r.tailW.stop()
	}
	if r.mq != nil {
		r.mq.stop()
	}
	if r.trustL != nil {
		r.trustL.stop()
	}
}

// teardown stops whatever is still running, on every path out of Run.
func (r *soakRun) teardown() {
	r.stopLoad()
	if r.e != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r.e.Shutdown(ctx)
		cancel()
	}
	if r.broker != nil {
		r.broker.Kill()
	}
}

// run takes the starting levels, runs the load, stops it, waits for the
// last deliveries, takes the final levels and fills the report.
func (r *soakRun) run(ctx context.Context) *Report {
	c := r.cfg
	rep := &Report{Command: "soak", Runner: r.e.Runner(), Seed: c.Seed, Host: harness.HostInfo(), Config: soakParams{
		PeakConns: c.PeakConns, LowConns: c.LowConns, CycleS: c.Cycle.Seconds(), Churn: c.Churn,
		ConnBytes: int64(c.ConnBytes), UnixShare: c.UnixShare, UDPRate: c.UDPRate, TailRate: c.TailRate,
		RotateS: c.Rotate.Seconds(), MQTTRate: c.MQTTRate, MQTTPubs: c.MQTTPubs, MQTTRestart: c.MQTTRestart.Seconds(), TrustRate: c.TrustRate,
		Pool: c.Engine.Pool, Buf: int64(c.Engine.Buf),
	}}
	if !c.MQTT {
		rep.Config.MQTTPubs, rep.Config.MQTTRate, rep.Config.MQTTRestart = 0, 0, 0
	}
	start := r.settledLevels(nil)
	fds0 := describeFDs()
	r.baseSources = start.Sources
	r.overflows0, _ = listenOverflows()
	rep.Levels.Start = start
	fmt.Fprintf(r.ios.Err, "sluice-soak: runner %s, seed %d, %v: %s to %s connections (tcp %s, unix %s), churn %s/s; %s\n",
		r.e.Runner(), c.Seed, c.Duration, humanize.Comma(int64(c.LowConns)), humanize.Comma(int64(c.PeakConns)),
		r.tcpAddr, r.unixAddr, humanize.Comma(int64(c.Churn)), r.loadNote())
	fmt.Fprintf(r.ios.Err, "sluice-soak: start: %s\n", formatLevels(start))

	// The warm-up: one rise to the peak and back, so that every table
	// sized by the number of connections (the engine's, the runtime's
	// poll descriptors, the checker's maps) has reached its peak size
	// before the resident memory is taken as the baseline.
	engineNow := func() int { return r.e.Pool().Stats().Accounts - r.baseSources }
	warm := newStreamLoad(c, r.tcpAddr, r.unixAddr, r.chk, engineNow, 0)
	t0 := time.Now()
	reached := warm.start(true)
	select {
	case <-reached:
	case <-time.After(r.cfg.Settle):
		r.chk.failf("warm-up: the peak of %d connections was not reached in %v (%d open, %d in the engine)",
			c.PeakConns, r.cfg.Settle, warm.open.Load(), engineNow())
	case <-ctx.Done():
	}
	warm.stop()
	if n := warm.dialErrs.Load(); n > 0 {
		r.chk.failf("warm-up: %d connections could not be made (first: %s)", n, warm.firstDialErr())
	}
	r.settleConns(time.Now().Add(r.cfg.Settle))
	rep.Warmup = SoakWarmup{Opened: warm.opened.Load(), Peak: warm.peak.Load(), Seconds: time.Since(t0).Seconds()}
	rep.Levels.Warm = r.settledLevels(nil)
	fmt.Fprintf(r.ios.Err, "sluice-soak: warm-up: %s connections to a peak of %s in %.1fs; %s\n",
		humanize.Comma(int64(rep.Warmup.Opened)), humanize.Comma(rep.Warmup.Peak), rep.Warmup.Seconds, formatLevels(rep.Levels.Warm))
	r.verified0, r.unseen0 = r.chk.verified.Load(), r.chk.unseen.Load()

	// Start the load.
	t0 = time.Now()
	r.streams = newStreamLoad(c, r.tcpAddr, r.unixAddr, r.chk, engineNow, warm.seq)
	r.streams.start(false)
	if r.udpSrc != nil {
		r.udp = startUDPLoad(c, r.udpSrc.LocalAddr().String(), r.chk.udp, r.chk.failf)
	}
	if r.tail != nil {
		r.tailW = startTailLoad(c, r.chk.tail.path, r.tail, r.chk.tail, r.chk.failf)
	}
	if r.broker != nil {
		r.mq = startMQTTLoad(c, r.broker, r.mqtt, r.chk.mqtt, r.chk.failf)
	}
	if r.trustS != nil {
		r.trustL = startTrustLoad(c, r.trustS, r.chk)
	}
	prog := r.startProgress(t0)

	rep.StopReason = "duration"
	timer := time.NewTimer(c.Duration)
	select {
	case <-timer.C:
	case <-ctx.Done():
		rep.StopReason = "interrupted"
	}
	timer.Stop()
	rep.DurationS = time.Since(t0).Seconds()

	// Stop the load, then wait for the engine to deliver the rest.
	fmt.Fprintf(r.ios.Err, "sluice-soak: stopping the load after %.1fs\n", rep.DurationS)
	r.stopLoad()
	prog.finish()
	r.drain()

	end := r.settledLevels(&start)
	rep.Levels.End = end
	r.mu.Lock()
	rep.Levels.Peak = r.peak
	rep.Samples = slices.Clone(r.samples)
	r.mu.Unlock()
	if rep.Samples == nil {
		rep.Samples = []SoakSample{}
	}
	fmt.Fprintf(r.ios.Err, "sluice-soak: end:   %s\n", formatLevels(end))
	rep.Leaks = compareLevels(start, rep.Levels.Warm, end)
	if end.FDs > start.FDs {
		rep.Leaks = append(rep.Leaks, "descriptors left open: "+fdDiff(fds0, describeFDs()))
	}
	if rep.Leaks == nil {
		rep.Leaks = []string{}
	}
	r.fill(rep)
	return rep
}

func (r *soakRun) loadNote() string {
	c := r.cfg
	var parts []string
	if r.udpSrc != nil {
		parts = append(parts, fmt.Sprintf("udp %s datagrams/s", humanize.Comma(int64(c.UDPRate))))
	}
	if r.tail != nil {
		parts = append(parts, fmt.Sprintf("tail %s lines/s rotated every %v", humanize.Comma(int64(c.TailRate)), c.Rotate))
	}
	if r.broker != nil {
		restart := "never restarted"
		if c.MQTTRestart > 0 {
			restart = fmt.Sprintf("broker killed every %v", c.MQTTRestart)
		}
		parts = append(parts, fmt.Sprintf("mqtt %d x %g msgs/s, %s", c.MQTTPubs, c.MQTTRate, restart))
	}
	if r.trustS != nil {
		parts = append(parts, fmt.Sprintf("trust %g hostile peers/s and a flood of %d every %v at tls %s and proxy %s",
			c.TrustRate, soakTrustFlood, soakTrustFloodEvery, r.trustS.tlsAddr, r.trustS.proxyAddr))
	}
	if len(parts) == 0 {
		return "streams only"
	}
	return strings.Join(parts, "; ")
}

// drain waits, up to Settle, until every stream has been delivered and
// checked: each connection paired with its engine stream, every tail line
// and MQTT message in, every datagram received or counted as dropped.
// What is still missing then is a mismatch.
func (r *soakRun) drain() {
	deadline := time.Now().Add(r.cfg.Settle)
	r.settleConns(deadline)
	if r.udp != nil {
		waitUntil(deadline, func() bool { return r.udpAccounted() })
	}
	if r.tailW != nil {
		waitUntil(deadline, func() bool { return r.chk.tail.next.Load() >= r.tailW.written.Load() })
	}
	if r.mq != nil {
		waitUntil(deadline, r.mq.complete)
	}
	if r.trustL != nil {
		r.trustL.settle(deadline, r.chk.failf)
	}
	if r.udp != nil && !r.udpAccounted() {
		s := r.udpTotals()
		r.chk.failf("udp: %d datagrams sent, %d received, %d dropped by the kernel, %d too large: %d unaccounted for",
			s.Sent, s.Received, s.KernelDrops, s.TooLarge, int64(s.Sent)-int64(s.Received+s.KernelDrops+s.TooLarge))
	}
	if r.tailW != nil {
		if got, want := r.chk.tail.next.Load(), r.tailW.written.Load(); got < want {
			r.chk.failf("tail: %d lines written, the engine delivered up to line %d", want, got)
		}
	}
	if r.mq != nil {
		r.mq.finish()
	}
}

// settleConns waits until every connection made so far has been checked,
// but for aborted ones the engine may never see (see connEnd); those it
// waits for until the TCP listener has no connection in its accept queue
// or its handshake, after which none can arrive. What is still unpaired
// then is a mismatch.
func (r *soakRun) settleConns(deadline time.Time) {
	_, p, _ := net.SplitHostPort(r.tcpAddr)
	port, _ := strconv.Atoi(p)
	waitUntil(deadline, func() bool {
		if !r.chk.connsSettled() {
			return false
		}
		backlog, handshakes, err := listenQueue(port)
		return err == nil && backlog == 0 && handshakes == 0
	})
	r.chk.finishConns()
	r.chk.compact()
}

// udpTotals reads the UDP counters of both sides.
func (r *soakRun) udpTotals() SoakUDP {
	s := SoakUDP{Enabled: true}
	for _, snd := range r.udp.senders {
		s.Sent += snd.sent.Load()
		s.SendErrors += snd.errs.Load()
	}
	s.Received = r.chk.udp.received.Load()
	s.Bytes = r.chk.udp.bytes.Load()
	s.Reordered = r.chk.udp.reordered.Load()
	s.TooLarge = r.chk.udp.tooLarge.Load()
	if d, err := r.udpSrc.Drops(); err == nil {
		s.KernelDrops = d
	}
	return s
}

// udpAccounted says whether every datagram sent was received or dropped.
func (r *soakRun) udpAccounted() bool {
	s := r.udpTotals()
	return s.Received+s.KernelDrops+s.TooLarge >= s.Sent
}

// waitFor polls cond every few milliseconds for up to d.
func waitFor(d time.Duration, cond func() bool) bool { return waitUntil(time.Now().Add(d), cond) }

// waitUntil polls cond until it holds or the deadline passes. The soak
// waits on other processes and on the kernel, which have nothing to
// signal with.
func waitUntil(deadline time.Time, cond func() bool) bool {
	for d := time.Millisecond; ; d = min(2*d, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
	}
}
