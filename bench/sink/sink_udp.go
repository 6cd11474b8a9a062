package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
	"golang.org/x/sys/unix"
)

// DefaultUDPReadBuffer is the UDP sinks' SO_RCVBUF: what a telemetry
// receiver is commonly given so that it rides out a scheduling hiccup.
// The kernel doubles it, capped at net.core.rmem_max.
const DefaultUDPReadBuffer = 4 << 20

// UDPSinkReport is the report of a UDP sink: `sink --proto udp` on the
// engine, and the reference sinks of bench/gnetsink with -proto udp, whose
// reports have the same fields.
type UDPSinkReport struct {
	Command string `json:"command"` // "sink"
	Proto   string `json:"proto"`   // "udp"
	Runner  string `json:"runner"`
	Listen  string `json:"listen"`
	// DatagramSize is the size of the load's datagrams: those are counted
	// in Datagrams, every other size (fio's open and close messages) in
	// Others.
	DatagramSize int    `json:"datagram_size"`
	Datagrams    uint64 `json:"datagrams"`
	Others       uint64 `json:"other_datagrams"`
	Bytes        uint64 `json:"bytes"`
	// Drops is the kernel's drop counter of the sink's socket when it
	// stopped (the drops column of /proc/net/udp; for the engine,
	// srcs.UDPSource.Drops); -1 when it could not be read.
	Drops int64 `json:"drops"`
	// ReadBuffer is SO_RCVBUF as the kernel reports it: twice what was
	// asked, capped by net.core.rmem_max.
	ReadBuffer int `json:"read_buffer"`
	// FirstNs and LastNs are when the first and the latest datagram of
	// DatagramSize bytes arrived (UnixNano).
	FirstNs int64   `json:"first_ns"`
	LastNs  int64   `json:"last_ns"`
	WallS   float64 `json:"wall_s"`
	CPUS    float64 `json:"cpu_s"`
	// Usage samples the sink's CPU time and datagrams every 100 ms.
	Usage        []UDPUsage `json:"usage,omitempty"`
	ThreadsMax   int        `json:"threads_max"`
	RSSMaxBytes  int64      `json:"rss_max_bytes"`
	Errors       uint64     `json:"errors"`
	ErrorSamples []string   `json:"error_samples,omitempty"`
	StopReason   string     `json:"stop_reason"`
	// Counters are the runner's own over the time listened (the engine's
	// sink only), the rates over first_ns to last_ns.
	Counters *bench.Counters `json:"counters,omitempty"`
}

// UDPUsage is a UDP sink's CPU time since it began listening, and the
// datagrams of the load's size it had received, at one moment.
type UDPUsage struct {
	UnixNs    int64  `json:"unix_ns"`
	CPUNs     int64  `json:"cpu_ns"`
	Datagrams uint64 `json:"datagrams"`
}

// usage returns us as UsageSamples whose Bytes count datagrams, for
// UsageOver.
func UDPUsageSamples(us []UDPUsage) []harness.UsageSample {
	out := make([]harness.UsageSample, len(us))
	for i, u := range us {
		out[i] = harness.UsageSample{UnixNs: u.UnixNs, CPUNs: u.CPUNs, Bytes: u.Datagrams}
	}
	return out
}

// udpTally is the UDP sink's job on the engine: count the datagrams of
// each chunk, by whether they have the load's size, and their bytes. Safe
// for concurrent use.
type udpTally struct {
	size      int
	datagrams atomic.Uint64
	others    atomic.Uint64
	bytes     atomic.Uint64
	// first and last are when the first and latest datagram of the load's
	// size was delivered, seen when any datagram was (UnixNano).
	first, last, seen atomic.Int64
	errs              atomic.Uint64

	mu         sync.Mutex
	errSamples []string
}

func (u *udpTally) chunk(c engine.Chunk) {
	defer c.Release()
	if len(c.Data) == 0 {
		return
	}
	if c.Flags&srcs.Datagrams == 0 {
		u.onError(fmt.Errorf("bench: a chunk of %d bytes without the Datagrams flag", len(c.Data)))
		return
	}
	var n, other, bytes uint64
	err := srcs.ForEachDatagram(c.Data, func(p []byte) bool {
		if len(p) == u.size {
			n++
		} else {
			other++
		}
		bytes += uint64(len(p))
		return true
	})
	if err != nil {
		u.onError(err)
	}
	now := time.Now().UnixNano()
	if n > 0 {
		u.first.CompareAndSwap(0, now)
		u.last.Store(now)
		u.datagrams.Add(n)
	}
	u.seen.Store(now)
	u.others.Add(other)
	u.bytes.Add(bytes)
}

func (u *udpTally) onError(err error) {
	if u.errs.Add(1) <= bench.MaxErrorSamples {
		u.mu.Lock()
		u.errSamples = append(u.errSamples, err.Error())
		u.mu.Unlock()
	}
}

// validateUDP checks the flags of `sink --proto udp`.
func (c SinkConfig) validateUDP() error {
	switch {
	case c.Proto != load.ProtoTCP && c.Proto != load.ProtoUDP:
		return fmt.Errorf("--proto: %q: must be tcp or udp", c.Proto)
	case c.Proto == load.ProtoTCP:
		if c.DatagramSize != 0 {
			return errors.New("--datagram-size: only with --proto udp")
		}
		return nil
	case c.DatagramSize < 1 || c.DatagramSize > srcs.MaxUDPPayload:
		return fmt.Errorf("--datagram-size: %d: with --proto udp, must be from 1 to %d", c.DatagramSize, srcs.MaxUDPPayload)
	case c.UDPReadBuffer < 0 || c.UDPReadBuffer > 1<<30:
		return fmt.Errorf("--udp-read-buffer: %d: must be from 0 to 1GiB", c.UDPReadBuffer)
	case c.Ports != 1:
		return errors.New("--ports: --proto udp listens on one port")
	case c.Engine.Framing != "" && c.Engine.Framing != "none":
		return errors.New("--framing: a UDP source delivers datagrams, not records")
	}
	return nil
}

// sinkUDP is `sink --proto udp`: the engine with one UDP source, counting
// datagrams until idle, Duration or ctx ends.
func sinkUDP(ctx context.Context, c SinkConfig, ios harness.IO) (*UDPSinkReport, error) {
	src, err := srcs.ListenUDP(srcs.UDPConfig{Addr: c.Listen, ReadBuffer: int(c.UDPReadBuffer), MaxDatagram: c.DatagramSize})
	if err != nil {
		return nil, err
	}
	rcvbuf := 0
	if rc, err := src.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { rcvbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
	}
	tally := &udpTally{size: c.DatagramSize}
	e, err := engine.New(c.Engine.Config(c.Runner), c.Engine.Handler(tally.chunk), engine.WithErrorHandler(tally.onError))
	if err != nil {
		src.Close()
		return nil, err
	}
	defer bench.ShutdownEngine(e)
	if c.Runner != engine.RunnerAuto && e.Runner() != c.Runner {
		src.Close()
		return nil, fmt.Errorf("bench: asked for runner %s but the engine chose %s (is %s set?)", c.Runner, e.Runner(), engine.EnvRunner)
	}
	if _, err := e.AddSource(src); err != nil {
		src.Close()
		return nil, err
	}
	smp := harness.StartSampler()
	rs0 := bench.SumRunnerStats(e.Stats().Runners)
	cpu0 := harness.CPUTime()
	t0 := time.Now()
	fmt.Fprintf(ios.Err, "sluice-bench sink: listening on %s (runner %s, udp, %d-byte datagrams, SO_RCVBUF %d)\n",
		src.LocalAddr(), e.Runner(), c.DatagramSize, rcvbuf)
	reason := "interrupted"
	limit, ticker, stopClocks := c.clocks()
	defer stopClocks()
	usage := []UDPUsage{{UnixNs: t0.UnixNano()}}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-limit:
			reason = "duration"
			break loop
		case now := <-ticker.C:
			n := tally.datagrams.Load()
			usage = append(usage, UDPUsage{UnixNs: now.UnixNano(), CPUNs: int64(harness.CPUTime() - cpu0), Datagrams: n})
			// Any datagram starts the count to idle, fio's open message
			// too, so that a sink which lost every one of the load's stops.
			if seen := tally.seen.Load(); c.UntilIdle > 0 && seen > 0 && now.Sub(time.Unix(0, seen)) >= c.UntilIdle {
				reason = "idle"
				break loop
			}
		}
	}
	wall := time.Since(t0)
	usage = append(usage, UDPUsage{UnixNs: time.Now().UnixNano(), CPUNs: int64(harness.CPUTime() - cpu0), Datagrams: tally.datagrams.Load()})
	drops := int64(-1)
	if d, err := src.Drops(); err == nil {
		drops = int64(d)
	} else {
		fmt.Fprintf(ios.Err, "sluice-bench sink: %v\n", err)
	}
	rs1 := bench.SumRunnerStats(e.Stats().Runners)
	runner := e.Runner()
	if err := bench.ShutdownEngine(e); err != nil {
		return nil, err
	}
	cpu := harness.CPUTime() - cpu0
	threads, rss := smp.Finish()
	tally.mu.Lock()
	samples := tally.errSamples
	tally.mu.Unlock()
	rep := &UDPSinkReport{Command: "sink", Proto: load.ProtoUDP, Runner: runner, Listen: src.LocalAddr().String(), DatagramSize: c.DatagramSize,
		Datagrams: tally.datagrams.Load(), Others: tally.others.Load(), Bytes: tally.bytes.Load(), Drops: drops, ReadBuffer: rcvbuf,
		FirstNs: tally.first.Load(), LastNs: tally.last.Load(), WallS: wall.Seconds(), CPUS: cpu.Seconds(), Usage: usage,
		ThreadsMax: threads, RSSMaxBytes: rss, Errors: tally.errs.Load(), ErrorSamples: samples, StopReason: reason}
	counters := bench.CounterDeltas(rs0, rs1, rep.Bytes, time.Duration(rep.LastNs-rep.FirstNs).Seconds())
	rep.Counters = &counters
	fmt.Fprintf(ios.Err, "sluice-bench sink: stopped (%s): %d datagrams of %d bytes, %d others, %d dropped by the kernel\n",
		reason, rep.Datagrams, rep.DatagramSize, rep.Others, rep.Drops)
	path := c.JSON
	if path == "" {
		path = "-"
	}
	if err := harness.WriteJSON(path, rep, ios); err != nil {
		return rep, err
	}
	return rep, nil
}
