package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// UDPReport is the report of -proto udp, with the fields of sluice-bench's
// UDP sink report (bench.UDPSinkReport).
type UDPReport struct {
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
	// Drops is the kernel's drop counter of the sink's sockets (the drops
	// column of /proc/net/udp) when it stopped; -1 when it could not be
	// read.
	Drops int64 `json:"drops"`
	// ReadBuffer is SO_RCVBUF as the kernel reports it (twice what was
	// asked, capped by net.core.rmem_max).
	ReadBuffer  int        `json:"read_buffer"`
	FirstNs     int64      `json:"first_ns"`
	LastNs      int64      `json:"last_ns"`
	WallS       float64    `json:"wall_s"`
	CPUS        float64    `json:"cpu_s"`
	Usage       []UDPUsage `json:"usage,omitempty"`
	ThreadsMax  int        `json:"threads_max"`
	RSSMaxBytes int64      `json:"rss_max_bytes"`
	Errors      uint64     `json:"errors"`
	StopReason  string     `json:"stop_reason"`
	EventLoops  int        `json:"event_loops,omitempty"`
}

// UDPUsage is the CPU time since the start and the datagrams of
// DatagramSize received at one moment, sampled every 100 ms.
type UDPUsage struct {
	UnixNs    int64  `json:"unix_ns"`
	CPUNs     int64  `json:"cpu_ns"`
	Datagrams uint64 `json:"datagrams"`
}

// udpCount is the job of a UDP sink: count every datagram, by whether it
// has the load's size, and its bytes. Safe for concurrent use.
type udpCount struct {
	size      int
	datagrams atomic.Uint64
	others    atomic.Uint64
	bytes     atomic.Uint64
	// first and last are when the first and latest datagram of the load's
	// size arrived, seen when any datagram did (UnixNano).
	first, last, seen atomic.Int64
}

func (u *udpCount) add(n int) {
	now := time.Now().UnixNano()
	if n == u.size {
		u.datagrams.Add(1)
		u.first.CompareAndSwap(0, now)
		u.last.Store(now)
	} else {
		u.others.Add(1)
	}
	u.bytes.Add(uint64(n))
	u.seen.Store(now)
}

// udpServer is a bound UDP sink: gnet's event loops, or one goroutine
// reading Go's net.UDPConn.
type udpServer interface {
	addr() string
	fds() ([]int, error) // duplicates of its sockets, for their options; the caller closes them
	stop() error
	String() string
}

// gnetUDP is the sink on gnet v2's event loops: gnet reads each datagram
// on a loop and hands it to OnTraffic.
type gnetUDP struct {
	gnet.BuiltinEventEngine
	cnt    *udpCount
	booted chan gnet.Engine
	eng    gnet.Engine
	bound  string
	loops  int
	runErr chan error
}

func (g *gnetUDP) OnBoot(eng gnet.Engine) gnet.Action {
	g.booted <- eng
	return gnet.None
}

func (g *gnetUDP) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Next(-1)
	g.cnt.add(len(buf))
	return gnet.None
}

func serveGnetUDP(cnt *udpCount, listen string, loops, readBuffer int) (*gnetUDP, error) {
	// gnet binds UDP with SO_REUSEPORT, a socket per event loop: each
	// must bind the same port, so port 0 is resolved first.
	listen, err := fixedPort(listen)
	if err != nil {
		return nil, err
	}
	g := &gnetUDP{cnt: cnt, booted: make(chan gnet.Engine, 1), bound: listen, loops: loops, runErr: make(chan error, 1)}
	opts := []gnet.Option{gnet.WithMulticore(true), gnet.WithNumEventLoop(loops), gnet.WithLogger(quietLogger{})}
	if readBuffer > 0 {
		opts = append(opts, gnet.WithSocketRecvBuffer(readBuffer))
	}
	go func() { g.runErr <- gnet.Run(g, "udp://"+listen, opts...) }()
	select {
	case g.eng = <-g.booted:
	case err := <-g.runErr:
		return nil, fmt.Errorf("listen udp %s: %v", listen, err)
	}
	return g, nil
}

func (g *gnetUDP) addr() string   { return g.bound }
func (g *gnetUDP) String() string { return fmt.Sprintf("gnet v2 udp, %d event loops", g.loops) }

func (g *gnetUDP) fds() ([]int, error) {
	fd, err := g.eng.Dup()
	if err != nil {
		return nil, err
	}
	return []int{fd}, nil
}

func (g *gnetUDP) stop() error {
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

// fixedPort returns listen with port 0 replaced by a free UDP port.
func fixedPort(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("-listen %q: %v", listen, err)
	}
	if port != "0" {
		return listen, nil
	}
	c, err := net.ListenPacket("udp", listen)
	if err != nil {
		return "", fmt.Errorf("listen udp %s: %v", listen, err)
	}
	defer c.Close()
	return net.JoinHostPort(host, strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)), nil
}

// stdUDP is the sink a user of Go's net package alone would write: one
// socket, one goroutine calling ReadFromUDP into a buffer of its own.
type stdUDP struct {
	c    *net.UDPConn
	done chan struct{}
}

func serveStdUDP(cnt *udpCount, listen string, readBuffer int) (*stdUDP, error) {
	a, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %v", listen, err)
	}
	c, err := net.ListenUDP("udp", a)
	if err != nil {
		return nil, fmt.Errorf("listen udp %s: %v", listen, err)
	}
	if readBuffer > 0 {
		if err := c.SetReadBuffer(readBuffer); err != nil {
			c.Close()
			return nil, fmt.Errorf("SO_RCVBUF: %v", err)
		}
	}
	s := &stdUDP{c: c, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 64<<10)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					fmt.Fprintf(os.Stderr, "gnetsink: read: %v\n", err)
				}
				return
			}
			cnt.add(n)
		}
	}()
	return s, nil
}

func (s *stdUDP) addr() string   { return s.c.LocalAddr().String() }
func (s *stdUDP) String() string { return "Go's net package, one ReadFromUDP loop" }

func (s *stdUDP) fds() ([]int, error) {
	rc, err := s.c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var dupErr error
	if err := rc.Control(func(f uintptr) { fd, dupErr = unix.Dup(int(f)) }); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, dupErr
	}
	return []int{fd}, nil
}

func (s *stdUDP) stop() error {
	err := s.c.Close()
	<-s.done
	return err
}

// socketCounters returns the kernel's drop counter of srv's sockets,
// summed over every socket bound to its port (gnet binds one per event
// loop, with SO_REUSEPORT), and SO_RCVBUF of one of them; drops is -1
// when it cannot be read.
func socketCounters(srv udpServer) (drops int64, rcvbuf int) {
	if fds, err := srv.fds(); err == nil {
		for _, fd := range fds {
			rcvbuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
			unix.Close(fd)
		}
	}
	_, port, _ := net.SplitHostPort(srv.addr())
	p, _ := strconv.Atoi(port)
	n, err := udpPortDrops(p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gnetsink: drops: %v\n", err)
		return -1, rcvbuf
	}
	return n, rcvbuf
}

// udpPortDrops sums the drops column of /proc/net/udp and /proc/net/udp6
// over the sockets bound to port.
func udpPortDrops(port int) (int64, error) {
	var n int64
	found := 0
	suffix := fmt.Sprintf(":%04X", port)
	for _, path := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan() // the header
		for sc.Scan() {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
			f := bytes.Fields(sc.Bytes())
			if len(f) < 13 || !bytes.HasSuffix(f[1], []byte(suffix)) {
				continue
			}
			d, err := strconv.ParseInt(string(f[12]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: drops %q: %v", path, f[12], err)
			}
			n += d
			found++
		}
	}
	if found == 0 {
		return 0, fmt.Errorf("no socket bound to port %d in /proc/net/udp", port)
	}
	return n, nil
}

// runUDP is -proto udp: bind, count until idle or interrupted, report.
func runUDP(netName, listen string, loops, size, readBuffer int, untilIdle time.Duration, jsonPath string) error {
	cnt := &udpCount{size: size}
	var srv udpServer
	runner := "gnet"
	var runErr <-chan error
	if netName == "std" {
		s, err := serveStdUDP(cnt, listen, readBuffer)
		if err != nil {
			return err
		}
		srv, runner, loops, runErr = s, "go", 0, make(chan error)
	} else {
		g, err := serveGnetUDP(cnt, listen, loops, readBuffer)
		if err != nil {
			return err
		}
		srv, runErr = g, g.runErr
	}
	fmt.Fprintf(os.Stderr, "gnetsink: listening on %s (%s, udp)\n", srv.addr(), srv)
	resetPeakRSS()
	smp := startSampler()
	cpu0 := cpuTime()
	t0 := time.Now()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	tick := 100 * time.Millisecond
	if untilIdle > 0 {
		tick = min(tick, max(untilIdle/4, 5*time.Millisecond))
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	usage := []UDPUsage{{UnixNs: t0.UnixNano()}}
	reason := "interrupted"
loop:
	for {
		select {
		case <-sigs:
			break loop
		case err := <-runErr:
			return fmt.Errorf("gnet: %v", err)
		case now := <-ticker.C:
			usage = append(usage, UDPUsage{UnixNs: now.UnixNano(), CPUNs: int64(cpuTime() - cpu0), Datagrams: cnt.datagrams.Load()})
			// Any datagram starts the count to idle, fio's open message
			// too, so that a sink which lost every one of the load's stops.
			if seen := cnt.seen.Load(); untilIdle > 0 && seen > 0 && now.Sub(time.Unix(0, seen)) >= untilIdle {
				reason = "idle"
				break loop
			}
		}
	}
	wall := time.Since(t0)
	usage = append(usage, UDPUsage{UnixNs: time.Now().UnixNano(), CPUNs: int64(cpuTime() - cpu0), Datagrams: cnt.datagrams.Load()})
	drops, rcvbuf := socketCounters(srv)
	if err := srv.stop(); err != nil {
		return err
	}
	cpu := cpuTime() - cpu0
	threads, rss := smp.finish()
	rep := UDPReport{Command: "sink", Proto: "udp", Runner: runner, Listen: srv.addr(), DatagramSize: size,
		Datagrams: cnt.datagrams.Load(), Others: cnt.others.Load(), Bytes: cnt.bytes.Load(), Drops: drops, ReadBuffer: rcvbuf,
		FirstNs: cnt.first.Load(), LastNs: cnt.last.Load(), WallS: wall.Seconds(), CPUS: cpu.Seconds(), Usage: usage,
		ThreadsMax: threads, RSSMaxBytes: rss, StopReason: reason, EventLoops: loops}
	fmt.Fprintf(os.Stderr, "gnetsink: stopped (%s): %d datagrams of %d bytes, %d others, %d dropped by the kernel\n",
		reason, rep.Datagrams, size, rep.Others, rep.Drops)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if jsonPath == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(jsonPath, b, 0o644)
}
