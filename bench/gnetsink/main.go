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
// With -proto udp it counts the datagrams sent to -listen instead, and
// their bytes, apart by whether they have the load's -datagram-size: on
// gnet v2's udp:// event loops, or with -net std in one goroutine calling
// net.UDPConn.ReadFromUDP, both with -read-buffer as SO_RCVBUF. It stops
// as -until-idle says and reports the kernel's drop counter of its
// sockets (see UDPReport).
//
// With -net std it is instead the sink a user would write with Go's
// standard library alone: net.Listen, a goroutine per connection reading
// into a 64 KiB buffer, the same work after each read, and with -tls-cert
// and -tls-key a crypto/tls listener. It is the "go" and "go+tls" rows of
// `run --peers go`.
//
// With -net epoll (Linux only) it is the simplest sink the kernel allows:
// one goroutine locked to its OS thread, one epoll instance, the listener
// and every connection registered edge-triggered (EPOLLIN|EPOLLRDHUP|
// EPOLLET), and each ready connection read until EAGAIN into one shared
// 64 KiB buffer, the same work done on each read while the bytes are in
// the cache. It is the "bare-epoll" row of `run --peers epoll`: the floor
// under any event loop's cost. It speaks TCP only.
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
	"crypto/tls"
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
	// quiet marks the bench's quiet source (see quietLines), whose
	// bytes are lines of its clock, not load: they are timed, not
	// counted with the others.
	quiet *quietLines
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
	quiet   QuietReport // the quiet sources', under mu
}

func (s *sink) OnBoot(eng gnet.Engine) gnet.Action {
	s.booted <- eng
	return gnet.None
}

func (s *sink) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(s.opened(c.RemoteAddr().String()))
	return nil, gnet.None
}

func (s *sink) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Next(-1)
	if len(buf) > 0 {
		s.traffic(c.Context().(*stream), buf)
	}
	return gnet.None
}

func (s *sink) OnClose(c gnet.Conn, err error) gnet.Action {
	st, _ := c.Context().(*stream)
	s.closedConn(st, err)
	return gnet.None
}

// opened starts the record of a new connection from peer.
func (s *sink) opened(peer string) *stream {
	st := &stream{peer: peer}
	s.mu.Lock()
	st.id = uint64(len(s.streams))
	s.streams = append(s.streams, st)
	s.mu.Unlock()
	s.open.Add(1)
	return st
}

// traffic does the job for the bytes one read brought st: checksum them,
// count the records, keep the times.
func (s *sink) traffic(st *stream, buf []byte) {
	n := len(buf)
	now := time.Now().UnixNano()
	if st.bytes == 0 && st.quiet == nil && isQuiet(buf) {
		st.quiet = &quietLines{}
		s.mu.Lock()
		s.quiet.Connections++
		s.mu.Unlock()
	}
	if st.quiet != nil {
		st.bytes += uint64(n)
		s.mu.Lock()
		st.quiet.feed(buf, now, &s.quiet)
		s.mu.Unlock()
		return
	}
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
}

// closedConn ends st's connection, which err ended (nil or io.EOF: the
// peer closed it); st is nil for a connection that never opened.
func (s *sink) closedConn(st *stream, err error) {
	if st != nil && err != nil && !errors.Is(err, io.EOF) {
		st.errors++
		s.errs.Add(1)
	}
	if now := time.Now().UnixNano(); s.firstEnd.CompareAndSwap(0, now) {
		s.firstEndBytes.Store(s.total.Load())
	}
	if n := s.closed.Add(1); s.expect > 0 && n == s.expect {
		s.endOnce.Do(func() { close(s.ended) })
	}
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
	// Quiet is the quiet sources' lines and their latencies; the
	// streams and totals above leave them out.
	Quiet *QuietReport `json:"quiet,omitempty"`
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
	netName := flag.String("net", "gnet", "gnet; std: Go's net package, a goroutine per connection; or epoll (Linux): a bare edge-triggered epoll loop on one locked thread")
	tlsCert := flag.String("tls-cert", "", "with -net std: serve TLS with this PEM certificate `FILE`")
	tlsKey := flag.String("tls-key", "", "with -net std: the certificate's PEM key `FILE`")
	proto := flag.String("proto", "tcp", "tcp, or udp: count the datagrams sent to -listen (see -datagram-size)")
	dgSize := flag.Int("datagram-size", 0, "with -proto udp: the load's datagram size; datagrams of other sizes are counted apart")
	readBuffer := flag.Int("read-buffer", 0, "with -proto udp: SO_RCVBUF in bytes (default: the system's)")
	flag.Parse()
	switch {
	case *proto != "tcp" && *proto != "udp":
		return fmt.Errorf("-proto %q: must be tcp or udp", *proto)
	case *proto == "udp" && (*dgSize < 1 || *dgSize > 65507):
		return fmt.Errorf("-datagram-size %d: with -proto udp, must be from 1 to 65507", *dgSize)
	case *proto == "udp" && (*control || *tlsCert != "" || *framing != "none"):
		return errors.New("-proto udp: not with -control, -tls-cert or -framing")
	case *readBuffer < 0:
		return fmt.Errorf("-read-buffer %d: must not be negative", *readBuffer)
	}
	if *proto == "udp" {
		if *netName == "epoll" {
			return errors.New("-net epoll: TCP only; with -proto udp use -net gnet or std")
		}
		if *netName != "gnet" && *netName != "std" {
			return fmt.Errorf("-net %q: must be gnet or std", *netName)
		}
		loops := *loops
		if loops <= 0 {
			loops = runtime.GOMAXPROCS(0)
		}
		return runUDP(*netName, *listen, loops, *dgSize, *readBuffer, *untilIdle, *jsonPath)
	}
	if *framing != "none" && *framing != "newline" {
		return fmt.Errorf("-framing %q: must be none or newline", *framing)
	}
	switch {
	case *netName != "gnet" && *netName != "std" && *netName != "epoll":
		return fmt.Errorf("-net %q: must be gnet, std or epoll", *netName)
	case (*tlsCert == "") != (*tlsKey == ""):
		return errors.New("-tls-cert and -tls-key: give both or neither")
	case *tlsCert != "" && *netName != "std":
		return errors.New("-tls-cert: with -net std only (this sink's gnet reads plaintext)")
	}
	n := *loops
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	s := &sink{newline: *framing == "newline", crc: *crc, expect: *expect,
		booted: make(chan gnet.Engine, 1), ended: make(chan struct{})}

	runner := "gnet"
	var srv server
	var runErr <-chan error
	switch *netName {
	case "epoll":
		runner, n = "bare-epoll", 1
		es, err := serveEpoll(s, *listen)
		if err != nil {
			return err
		}
		srv, runErr = es, es.runErr()
	case "std":
		runner, n = "go", 0
		var cfg *tls.Config
		if *tlsCert != "" {
			runner = "go+tls"
			cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
			if err != nil {
				return fmt.Errorf("-tls-cert, -tls-key: %v", err)
			}
			cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
		ss, err := serveStd(s, *listen, cfg)
		if err != nil {
			return err
		}
		srv, runErr = ss, make(chan error) // never fails after it listens
	default:
		gs, err := serveGnet(s, *listen, n)
		if err != nil {
			return err
		}
		srv, runErr = gs, gs.runErr
	}
	addr := srv.addr()
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
		fmt.Fprintf(os.Stderr, "gnetsink: listening on %s (%s, framing %s)\n", addr, srv, *framing)
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
			return fmt.Errorf("%s: %v", runner, err)
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
	if err := srv.stop(); err != nil {
		return err
	}
	cpu := cpuTime() - cpu0
	threads, rss := smp.finish()
	pprof.StopCPUProfile()

	rep := Report{Command: "sink", Runner: runner, Listen: []string{addr}, Framing: *framing,
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
		if st.quiet != nil {
			continue
		}
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
	if s.quiet.Connections > 0 {
		q := s.quiet
		rep.Quiet = &q
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

// server is a listening sink: gnet's event loops, or Go's net package.
type server interface {
	addr() string
	stop() error
	String() string
}

// gnetServer is the sink on gnet's event loops.
type gnetServer struct {
	eng    gnet.Engine
	bound  string
	loops  int
	runErr chan error // gnet.Run's result
}

func serveGnet(s *sink, listen string, loops int) (*gnetServer, error) {
	g := &gnetServer{loops: loops, runErr: make(chan error, 1)}
	go func() {
		g.runErr <- gnet.Run(s, "tcp://"+listen, gnet.WithMulticore(true), gnet.WithNumEventLoop(loops),
			gnet.WithLogger(quietLogger{}))
	}()
	select {
	case g.eng = <-s.booted:
	case err := <-g.runErr:
		return nil, fmt.Errorf("listen %s: %v", listen, err)
	}
	var err error
	if g.bound, err = boundAddr(g.eng); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *gnetServer) addr() string   { return g.bound }
func (g *gnetServer) String() string { return fmt.Sprintf("gnet v2, %d event loops", g.loops) }

func (g *gnetServer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.eng.Stop(ctx); err != nil {
		return fmt.Errorf("stop: %v", err)
	}
	if err := <-g.runErr; err != nil {
		return fmt.Errorf("gnet: %v", err)
	}
	return nil
}

// stdBufSize is what each connection of the std sink reads into: the
// engine's default pool buffer.
const stdBufSize = 64 << 10

// stdServer is the sink written with Go's net package (and crypto/tls): a
// goroutine per connection, each reading into a buffer of its own and
// doing the work after every read.
type stdServer struct {
	ln  net.Listener
	tls bool
	wg  sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	stopped bool
}

func serveStd(s *sink, listen string, cfg *tls.Config) (*stdServer, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %v", listen, err)
	}
	ss := &stdServer{ln: ln, tls: cfg != nil, conns: map[net.Conn]struct{}{}}
	if cfg != nil {
		ss.ln = tls.NewListener(ln, cfg)
	}
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		for {
			c, err := ss.ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return // closed by stop
			}
			if err != nil {
				// Out of descriptors, say: the connection waits in the
				// backlog, and the bench reports it if it never opens.
				fmt.Fprintf(os.Stderr, "gnetsink: accept: %v\n", err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if !ss.track(c) {
				c.Close()
				return
			}
			ss.wg.Add(1)
			go func() {
				defer ss.wg.Done()
				defer ss.untrack(c)
				st := s.opened(c.RemoteAddr().String())
				buf := make([]byte, stdBufSize)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.traffic(st, buf[:n])
					}
					if err != nil {
						if errors.Is(err, net.ErrClosed) {
							err = nil // closed by stop, not by a fault
						}
						s.closedConn(st, err)
						return
					}
				}
			}()
		}
	}()
	return ss, nil
}

func (ss *stdServer) track(c net.Conn) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stopped {
		return false
	}
	ss.conns[c] = struct{}{}
	return true
}

func (ss *stdServer) untrack(c net.Conn) {
	ss.mu.Lock()
	delete(ss.conns, c)
	ss.mu.Unlock()
	c.Close()
}

func (ss *stdServer) addr() string { return ss.ln.Addr().String() }

func (ss *stdServer) String() string {
	if ss.tls {
		return "Go's net and crypto/tls, a goroutine per connection"
	}
	return "Go's net package, a goroutine per connection"
}

// stop closes the listener and every connection still open, and waits for
// their goroutines.
func (ss *stdServer) stop() error {
	ss.mu.Lock()
	ss.stopped = true
	for c := range ss.conns {
		c.Close()
	}
	ss.mu.Unlock()
	err := ss.ln.Close()
	ss.wg.Wait()
	if err != nil {
		return fmt.Errorf("stop: %v", err)
	}
	return nil
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
	switch sa.(type) {
	case *unix.SockaddrInet4, *unix.SockaddrInet6:
		return sockaddrString(sa), nil
	}
	return "", fmt.Errorf("listener: unexpected address %T", sa)
}

// sockaddrString writes a TCP address as net.Addr.String does.
func sockaddrString(sa unix.Sockaddr) string {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(sa.Port))
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(sa.Port))
	}
	return fmt.Sprint(sa)
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
