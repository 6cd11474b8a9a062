// Command gnetsink is the gnet v2 reference sink of sluice-bench: a TCP
// sink written the way a user who picked gnet instead of sluice would
// write it, doing the job of the bench's engine consumer. For every
// connection it keeps the CRC-32C of its bytes and, with -framing newline,
// counts its '\n'-terminated records and the bytes after the last one,
// inline on gnet's event loop (one epoll_wait for many ready connections,
// one read each, the work in OnTraffic). With -loops 0 it runs one event
// loop per CPU it may use (GOMAXPROCS), as the engine runs one worker per
// CPU.
//
// It lives in a module of its own so that gnet never enters the module
// graph of sluice: sluice-bench builds it from this directory (go build,
// into a cache directory) and runs it as the "gnet" row of `run --peers
// gnet`, pinned like the engine.
//
// It has two ways to run:
//
//   - Like `sluice-bench sink`: -until-idle D stops once bytes arrived,
//     every connection is closed and nothing arrived for D; the report goes
//     to -json. Its cpu_s covers the whole time listened; usage samples
//     the CPU time and bytes every 100 ms.
//   - -control: commands on stdin, one a line: "stats" (answers a stats
//     line), "mark" (starts the measured interval: CPU, peak RSS and
//     threads from here; answers a marked line), "stop" (answers with the
//     report and exits). With -expect N it announces, unasked, the moment
//     the N-th connection closes (an "ended" line with the CPU time used
//     since the mark and the wall clock). Every answer is one JSON line on
//     stdout; the first is {"event":"listening","addr":...}.
//
// The report has the fields of sluice-bench's sink report (bench.SinkReport)
// that a gnet sink can fill, with runner "gnet".
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// lineBlock is the block size of the newline pass, as in the bench's
// collector: the checksum reads a block, the count scans it while it is
// still in the L1 cache.
const lineBlock = 8 << 10

// stream is one connection. Only its event loop touches it until the
// engine has stopped.
type stream struct {
	id      uint64
	peer    string
	bytes   uint64
	crc     uint32
	records uint64
	tail    uint64 // bytes after the last '\n'
	errors  uint64
	first   int64 // UnixNano of its first byte
	last    int64 // and of its latest
}

// sink is the gnet event handler.
type sink struct {
	gnet.BuiltinEventEngine
	newline bool
	crc     bool
	expect  int64
	booted  chan gnet.Engine
	ended   chan struct{} // closed when the expect-th connection closes

	open, closed atomic.Int64
	total        atomic.Uint64
	records      atomic.Uint64
	first, last  atomic.Int64 // UnixNano of the first and latest byte
	errs         atomic.Uint64
	endOnce      sync.Once
	// The steady interval, while every connection was sending: from the
	// latest first byte of a connection to the first close, with the
	// total bytes at each end.
	lastStart, firstEnd           atomic.Int64
	lastStartBytes, firstEndBytes atomic.Uint64

	mu      sync.Mutex
	streams []*stream
}

func (s *sink) OnBoot(eng gnet.Engine) gnet.Action {
	s.booted <- eng
	return gnet.None
}

func (s *sink) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	st := &stream{peer: c.RemoteAddr().String()}
	s.mu.Lock()
	st.id = uint64(len(s.streams))
	s.streams = append(s.streams, st)
	s.mu.Unlock()
	c.SetContext(st)
	s.open.Add(1)
	return nil, gnet.None
}

func (s *sink) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Next(-1)
	n := len(buf)
	if n == 0 {
		return gnet.None
	}
	st := c.Context().(*stream)
	now := time.Now().UnixNano()
	if st.bytes == 0 {
		st.first = now
		s.lastStart.Store(now)
		s.lastStartBytes.Store(s.total.Load())
	}
	st.bytes += uint64(n)
	st.last = now
	if s.newline {
		var recs int
		for off := 0; off < n; off += lineBlock {
			b := buf[off:min(off+lineBlock, n)]
			if s.crc {
				st.crc = crc32.Update(st.crc, castagnoli, b)
			}
			recs += bytes.Count(b, []byte{'\n'})
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			st.tail = uint64(n - 1 - i)
		} else {
			st.tail += uint64(n)
		}
		st.records += uint64(recs)
		s.records.Add(uint64(recs))
	} else if s.crc {
		st.crc = crc32.Update(st.crc, castagnoli, buf)
	}
	s.first.CompareAndSwap(0, now)
	s.last.Store(now)
	s.total.Add(uint64(n))
	return gnet.None
}

func (s *sink) OnClose(c gnet.Conn, err error) gnet.Action {
	if st, ok := c.Context().(*stream); ok && err != nil && !errors.Is(err, io.EOF) {
		st.errors++
		s.errs.Add(1)
	}
	if now := time.Now().UnixNano(); s.firstEnd.CompareAndSwap(0, now) {
		s.firstEndBytes.Store(s.total.Load())
	}
	if n := s.closed.Add(1); s.expect > 0 && n == s.expect {
		s.endOnce.Do(func() { close(s.ended) })
	}
	return gnet.None
}

// Stream and Report mirror sluice-bench's SinkStream and SinkReport.
type Stream struct {
	Source         uint64 `json:"source"`
	Peer           string `json:"peer"`
	Bytes          uint64 `json:"bytes"`
	CRC32C         string `json:"crc32c"`
	Errors         uint64 `json:"errors"`
	Records        uint64 `json:"records"`
	RecordsSkipped uint64 `json:"records_skipped"`
	TruncatedBytes uint64 `json:"truncated_bytes"`
	FirstNs        int64  `json:"first_ns"`
	LastNs         int64  `json:"last_ns"`
}

type Report struct {
	Event         string   `json:"event,omitempty"` // "report" in control mode
	Command       string   `json:"command"`
	Runner        string   `json:"runner"`
	Listen        []string `json:"listen"`
	Sources       int      `json:"sources"`
	Framing       string   `json:"framing"`
	Bytes         uint64   `json:"bytes"`
	Records       uint64   `json:"records"`
	RecordsPerS   float64  `json:"records_per_s"`
	Truncated     uint64   `json:"truncated_bytes"`
	DurationS     float64  `json:"duration_s"`
	WallS         float64  `json:"wall_s"`
	ThroughputBps float64  `json:"throughput_bps"`
	SteadyBps     float64  `json:"steady_throughput_bps"`
	SteadyS       float64  `json:"steady_s"`
	CPUS          float64  `json:"cpu_s"`
	CPUSPerGiB    float64  `json:"cpu_s_per_gib"`
	Usage         []Usage  `json:"usage,omitempty"`
	ThreadsMax    int      `json:"threads_max"`
	RSSMaxBytes   int64    `json:"rss_max_bytes"`
	Errors        uint64   `json:"errors"`
	StopReason    string   `json:"stop_reason"`
	EventLoops    int      `json:"event_loops"`
	Streams       []Stream `json:"streams"`
}

// Usage is the CPU time since the start (or the mark) and the bytes
// received at one moment, sampled every 100 ms (sluice-bench's
// UsageSample).
type Usage struct {
	UnixNs int64  `json:"unix_ns"`
	CPUNs  int64  `json:"cpu_ns"`
	Bytes  uint64 `json:"bytes"`
}

// event is a control-mode line other than the report.
type event struct {
	Event  string `json:"event"`
	Addr   string `json:"addr,omitempty"`
	Open   int64  `json:"open"`
	Closed int64  `json:"closed"`
	Bytes  uint64 `json:"bytes"`
	CPUNs  int64  `json:"cpu_ns"`  // since the mark (or the start)
	UnixNs int64  `json:"unix_ns"` // when the line was made
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "gnetsink: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "listen on `ADDR`")
	framing := flag.String("framing", "none", "none, or newline: count '\\n'-terminated records")
	crc := flag.Bool("crc", true, "CRC-32C every connection's bytes")
	loops := flag.Int("loops", 0, "event loops (default GOMAXPROCS)")
	untilIdle := flag.Duration("until-idle", 0, "stop once bytes arrived, every connection closed and nothing arrived for this long")
	control := flag.Bool("control", false, "take commands on stdin (stats, mark, stop) and answer JSON lines on stdout")
	expect := flag.Int64("expect", 0, "with -control: announce when this many connections have closed")
	jsonPath := flag.String("json", "-", "write the report to `FILE` (- for stdout)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile (pprof) of the time listened to `FILE`")
	flag.Parse()
	if *framing != "none" && *framing != "newline" {
		return fmt.Errorf("-framing %q: must be none or newline", *framing)
	}
	n := *loops
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	s := &sink{newline: *framing == "newline", crc: *crc, expect: *expect,
		booted: make(chan gnet.Engine, 1), ended: make(chan struct{})}

	runErr := make(chan error, 1)
	go func() {
		runErr <- gnet.Run(s, "tcp://"+*listen, gnet.WithMulticore(true), gnet.WithNumEventLoop(n),
			gnet.WithLogger(quietLogger{}))
	}()
	var eng gnet.Engine
	select {
	case eng = <-s.booted:
	case err := <-runErr:
		return fmt.Errorf("listen %s: %v", *listen, err)
	}
	addr, err := boundAddr(eng)
	if err != nil {
		return err
	}
	out := json.NewEncoder(os.Stdout)
	var outMu sync.Mutex
	say := func(v any) {
		outMu.Lock()
		defer outMu.Unlock()
		out.Encode(v)
	}
	if *control {
		say(event{Event: "listening", Addr: addr, UnixNs: time.Now().UnixNano()})
	} else {
		fmt.Fprintf(os.Stderr, "gnetsink: listening on %s (gnet v2, %d event loops, framing %s)\n", addr, n, *framing)
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	resetPeakRSS()
	smp := startSampler()
	cpu0 := cpuTime()
	t0 := time.Now()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	cmds := make(chan string)
	if *control {
		go func() {
			sc := bufio.NewScanner(os.Stdin)
			for sc.Scan() {
				cmds <- sc.Text()
			}
			close(cmds)
		}()
	}
	snap := func(name string) event {
		return event{Event: name, Open: s.open.Load(), Closed: s.closed.Load(), Bytes: s.total.Load(),
			CPUNs: int64(cpuTime() - cpu0), UnixNs: time.Now().UnixNano()}
	}
	tick := 100 * time.Millisecond
	if *untilIdle > 0 {
		tick = min(tick, max(*untilIdle/4, 5*time.Millisecond))
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	usage := []Usage{{UnixNs: t0.UnixNano()}}
	ended := s.ended
	reason := "interrupted"
loop:
	for {
		select {
		case <-sigs:
			break loop
		case err := <-runErr:
			return fmt.Errorf("gnet: %v", err)
		case <-ended:
			ended = nil
			say(snap("ended"))
		case cmd, ok := <-cmds:
			if !ok {
				reason = "stdin closed"
				break loop
			}
			switch cmd {
			case "stats":
				say(snap("stats"))
			case "mark":
				resetPeakRSS()
				smp.reset()
				cpu0, t0 = cpuTime(), time.Now()
				usage = append(usage[:0], Usage{UnixNs: t0.UnixNano(), Bytes: s.total.Load()})
				s.first.Store(0)
				say(snap("marked"))
			case "stop":
				reason = "stop"
				break loop
			default:
				fmt.Fprintf(os.Stderr, "gnetsink: unknown command %q\n", cmd)
			}
		case now := <-ticker.C:
			usage = append(usage, Usage{UnixNs: now.UnixNano(), CPUNs: int64(cpuTime() - cpu0), Bytes: s.total.Load()})
			if *untilIdle > 0 && s.total.Load() > 0 && s.open.Load() == s.closed.Load() &&
				now.Sub(time.Unix(0, s.last.Load())) >= *untilIdle {
				reason = "idle"
				break loop
			}
		}
	}
	wall := time.Since(t0)
	usage = append(usage, Usage{UnixNs: time.Now().UnixNano(), CPUNs: int64(cpuTime() - cpu0), Bytes: s.total.Load()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := eng.Stop(ctx); err != nil {
		return fmt.Errorf("stop: %v", err)
	}
	if err := <-runErr; err != nil {
		return fmt.Errorf("gnet: %v", err)
	}
	cpu := cpuTime() - cpu0
	threads, rss := smp.finish()
	pprof.StopCPUProfile()

	rep := Report{Command: "sink", Runner: "gnet", Listen: []string{addr}, Framing: *framing,
		Bytes: s.total.Load(), Records: s.records.Load(), WallS: wall.Seconds(), CPUS: cpu.Seconds(),
		ThreadsMax: threads, RSSMaxBytes: rss, Errors: s.errs.Load(), StopReason: reason, EventLoops: n,
		Usage: usage, Streams: []Stream{}}
	if f, l := s.first.Load(), s.last.Load(); f > 0 && l > f {
		rep.DurationS = time.Duration(l - f).Seconds()
		rep.ThroughputBps = float64(rep.Bytes) / rep.DurationS
		rep.RecordsPerS = float64(rep.Records) / rep.DurationS
	}
	if a, b := s.lastStart.Load(), s.firstEnd.Load(); a > 0 && b > a {
		rep.SteadyS = time.Duration(b - a).Seconds()
		rep.SteadyBps = float64(s.firstEndBytes.Load()-s.lastStartBytes.Load()) / rep.SteadyS
	}
	if rep.Bytes > 0 {
		rep.CPUSPerGiB = rep.CPUS / (float64(rep.Bytes) / (1 << 30))
	}
	s.mu.Lock()
	for _, st := range s.streams {
		ss := Stream{Source: st.id, Peer: st.peer, Bytes: st.bytes, Errors: st.errors, Records: st.records,
			FirstNs: st.first, LastNs: st.last}
		if *crc {
			ss.CRC32C = fmt.Sprintf("%08x", st.crc)
		}
		if s.newline {
			ss.TruncatedBytes = st.tail
			rep.Truncated += st.tail
		}
		rep.Streams = append(rep.Streams, ss)
	}
	s.mu.Unlock()
	rep.Sources = len(rep.Streams)
	if *control {
		rep.Event = "report"
		say(rep)
		return nil
	}
	fmt.Fprintf(os.Stderr, "gnetsink: stopped (%s): %d sources, %d bytes in %.2fs, %.3f CPU-s/GiB\n",
		reason, rep.Sources, rep.Bytes, rep.DurationS, rep.CPUSPerGiB)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if *jsonPath == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(*jsonPath, b, 0o644)
}

// boundAddr is the listener's address, port 0 resolved.
func boundAddr(eng gnet.Engine) (string, error) {
	fd, err := eng.Dup()
	if err != nil {
		return "", fmt.Errorf("listener: %v", err)
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", fmt.Errorf("listener: %v", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(sa.Port)), nil
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(sa.Port)), nil
	}
	return "", fmt.Errorf("listener: unexpected address %T", sa)
}

// quietLogger keeps gnet's errors and drops its chatter (the start-up
// line), so that stderr carries only this sink's own lines.
type quietLogger struct{}

func (quietLogger) Debugf(string, ...any) {}
func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gnetsink: gnet: "+format+"\n", args...)
}
func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gnetsink: gnet: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gnetsink: gnet: "+format+"\n", args...)
	os.Exit(1)
}

// cpuTime is this process's user plus system CPU time (getrusage).
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sampler polls the thread count and RSS, keeping the maxima, as the
// bench does for the engine and as often (samplePeriod in bench/sys.go).
type sampler struct {
	mu         sync.Mutex
	threadsMax int
	rssMax     int64
	stop, done chan struct{}
}

func startSampler() *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.sample()
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	threads, rss, _ := readStatus()
	s.mu.Lock()
	s.threadsMax = max(s.threadsMax, threads)
	s.rssMax = max(s.rssMax, rss)
	s.mu.Unlock()
}

func (s *sampler) reset() {
	s.mu.Lock()
	s.threadsMax, s.rssMax = 0, 0
	s.mu.Unlock()
	s.sample()
}

func (s *sampler) finish() (int, int64) {
	close(s.stop)
	<-s.done
	s.sample()
	_, _, hwm := readStatus()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.threadsMax, max(s.rssMax, hwm)
}

func readStatus() (threads int, rss, hwm int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		val = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(val), []byte("kB")))
		switch string(key) {
		case "Threads":
			threads, _ = strconv.Atoi(string(val))
		case "VmRSS":
			n, _ := strconv.ParseInt(string(val), 10, 64)
			rss = n << 10
		case "VmHWM":
			n, _ := strconv.ParseInt(string(val), 10, 64)
			hwm = n << 10
		}
	}
	return threads, rss, hwm
}

// resetPeakRSS resets VmHWM to the current RSS (Linux 4.0).
func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
