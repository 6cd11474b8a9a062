package soak

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connEnd is how a soak connection ends, and with it the rule its bytes
// are checked by. On Linux a reset (RST) that reaches a socket leaves
// the bytes already in its receive queue readable, ahead of the
// ECONNRESET (checked: tcp_recvmsg copies queued data before it looks
// at sk_err); what a reset loses are the bytes still in the sender's send
// queue, which SO_LINGER 0 discards. So:
//
//   - endClose: close(2) after the last write. The engine must deliver
//     exactly what was written, then end the stream without an error.
//   - endHalfClose: shutdown(SHUT_WR), then read until the engine closes
//     its side (EOF). Exact, without an error, and the engine must close
//     within Settle.
//   - endReset (TCP only): wait until the send queue is empty (SIOCOUTQ
//     0: every byte written has been acknowledged by the engine's kernel,
//     so it is in the engine's socket or already read), then SO_LINGER 0
//     and close. Nothing may be lost: exact.
//   - endAbort (TCP only): SO_LINGER 0 and close right after the last
//     write, while bytes may still be in flight. Just before, the client
//     reads how many of its bytes the engine's kernel has not yet
//     acknowledged (SIOCOUTQ). Acknowledged bytes are in an established
//     socket of the engine's (a listener acknowledges data only once its
//     side of the handshake is complete, and a reset socket waiting to be
//     accepted is still accepted, with its bytes readable), so the engine
//     must deliver a prefix of what was written at least as long as what
//     was acknowledged: no more bytes than written, no fewer than
//     acknowledged, and the CRC-32C of the bytes it delivered must be
//     that of the stream's first that many bytes (the stream is seeded,
//     so the checker regenerates the prefix). A connection none of whose
//     bytes were acknowledged may never reach the engine at all: when the
//     listener's accept queue is full the kernel drops the client's last
//     handshake ACK, and the client's reset then ends a connection the
//     listener never had.
//
// Unix stream sockets have no reset: a close always delivers what was
// sent, so unix connections end by endClose or endHalfClose.
type connEnd uint8

const (
	endClose connEnd = iota
	endReset
	endAbort
	endHalfClose
	numEnds
)

var connEndNames = [numEnds]string{"close", "reset", "abort", "half_close"}

func (e connEnd) String() string { return connEndNames[e] }

// The mix of ends, in thousandths: TCP, then unix.
var (
	tcpEndMix  = [numEnds]int{endClose: 350, endReset: 200, endAbort: 150, endHalfClose: 300}
	unixEndMix = [numEnds]int{endClose: 600, endHalfClose: 400}
)

const (
	soakMaxWrite   = 64 << 10 // largest single write
	soakMaxDialing = 512      // connections in their dial at once
	soakDriverTick = 10 * time.Millisecond
	// soakTopOvershoot is how far above --peak-conns the top of the wave
	// aims: connections in their dial, and aborting ones that end on
	// their own, would otherwise keep the established count just under
	// the peak.
	soakTopOvershoot = 0.02
)

// soakStream is the seeded byte stream connection k writes: a PCG's
// output, 8 little-endian bytes per step, whatever the write sizes. The
// checker regenerates it to check the prefix an aborted connection
// delivered.
type soakStream struct {
	rng  rand.PCG
	tail [8]byte
	have int // unused bytes at the end of tail
}

func newSoakStream(seed, k uint64) *soakStream {
	s := &soakStream{}
	s.rng.Seed(seed, k)
	return s
}

// fill writes the stream's next len(p) bytes into p.
func (s *soakStream) fill(p []byte) {
	for s.have > 0 && len(p) > 0 {
		p[0] = s.tail[8-s.have]
		p, s.have = p[1:], s.have-1
	}
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, s.rng.Uint64())
		p = p[8:]
	}
	if len(p) > 0 {
		binary.LittleEndian.PutUint64(s.tail[:], s.rng.Uint64())
		n := copy(p, s.tail[:])
		s.have = 8 - n
	}
}

// soakPrefixCRC is the CRC-32C of the first n bytes of connection k's
// stream.
func soakPrefixCRC(seed, k uint64, n int64) uint32 {
	s := newSoakStream(seed, k)
	var buf [16 << 10]byte
	var crc uint32
	for n > 0 {
		m := int(min(n, int64(len(buf))))
		s.fill(buf[:m])
		crc = crc32.Update(crc, castagnoli, buf[:m])
		n -= int64(m)
	}
	return crc
}

// logUniform returns an integer from 1 to hi, log-uniformly.
func logUniform(rng *rand.Rand, hi int64) int64 {
	if hi <= 1 {
		return hi
	}
	return min(hi, int64(math.Exp(rng.Float64()*math.Log(float64(hi)+1))))
}

// soakLocalIP is the loopback address connection k binds: 127.a.b.c,
// none of a, b, c being 0 or 255, so that every connection of a run
// (up to 16 million) has a name of its own.
func soakLocalIP(k uint64) net.IP {
	c := byte(k%254 + 1)
	k /= 254
	b := byte(k%254 + 1)
	k /= 254
	a := byte(k%254 + 1)
	return net.IPv4(127, a, b, c)
}

// soakConn is the driver's handle on one established connection.
type soakConn struct {
	idx  int // in streamLoad.live; -1 once told to end or ended
	stop chan struct{}
}

// streamLoad drives the TCP and unix connections: a goroutine per
// connection, and a driver that opens and ends them on a 10ms tick
// following the wave. Its counters are safe to read at any time.
type streamLoad struct {
	cfg       Config
	tcpAddr   string
	unixAddr  string
	nonce     string
	chk       *soakChecker
	engineNow func() int // live engine sources of the stream load

	seq      uint64        // connections begun; the driver's alone
	done     chan struct{} // closed when the load stops; nil when stopped
	driverWG sync.WaitGroup
	connWG   sync.WaitGroup

	mu      sync.Mutex
	live    []*soakConn // established and not yet told to end
	dialErr error

	active       atomic.Int64 // begun and not ended, dials included
	dialing      atomic.Int64
	open         atomic.Int64 // established and not ended
	peak         atomic.Int64
	peakEngine   atomic.Int64
	peaksReached atomic.Int64
	opened       atomic.Uint64
	closed       atomic.Uint64
	tcp, unix    atomic.Uint64
	dialErrs     atomic.Uint64
	dialRetries  atomic.Uint64
	ends         [numEnds]atomic.Uint64
	written      atomic.Uint64

	bufs sync.Pool // *[]byte of soakMaxWrite bytes
}

// newStreamLoad returns a load whose connections are numbered from
// first on.
func newStreamLoad(c Config, tcpAddr, unixAddr string, chk *soakChecker, engineNow func() int, first uint64) *streamLoad {
	l := &streamLoad{cfg: c, tcpAddr: tcpAddr, unixAddr: unixAddr, chk: chk, engineNow: engineNow, seq: first}
	// The unix listener's abstract name, plus a dash: connection k binds
	// that name followed by k.
	l.nonce = unixAddr + "-"
	l.bufs.New = func() any { b := make([]byte, soakMaxWrite); return &b }
	return l
}

// start starts the driver. With warm, it opens connections up to the
// peak and then stops opening; the returned channel is closed once the
// peak is reached. Connections hold until stop.
func (l *streamLoad) start(warm bool) <-chan struct{} {
	done, reached := make(chan struct{}), make(chan struct{})
	l.done = done
	l.driverWG.Go(func() { l.drive(done, reached, warm) })
	return reached
}

// stop ends the load: the driver stops opening, every connection ends
// its own way, and stop returns when all have ended. The caller of start
// calls it.
func (l *streamLoad) stop() {
	if l.done != nil {
		close(l.done)
		l.done = nil
	}
	l.driverWG.Wait()
	l.connWG.Wait()
}

// wave phases.
const (
	waveUp = iota
	waveTop
	waveDown
	waveBottom
)

// drive is the driver's loop. The wave goes up from LowConns to the
// peak over 35% of Cycle, stays at the top until the peak is reached on
// both sides (established client connections and live engine sources;
// replacements pause meanwhile, so the top is a held level, not a race
// between openings and closings) and then for 15% of Cycle more, goes
// down over 35%, and stays at the bottom for 15%. On every tick Churn
// times the tick's length connections are told to end and as many are
// opened, on top of what the wave asks for. The warm-up's wave starts at
// the top and ends when the peak is reached.
func (l *streamLoad) drive(done <-chan struct{}, reached chan<- struct{}, warm bool) {
	c := l.cfg
	rng := rand.New(rand.NewPCG(c.Seed, 0x50a4))
	tick := time.NewTicker(soakDriverTick)
	defer tick.Stop()
	low, peak := float64(c.LowConns), float64(c.PeakConns)
	top := math.Ceil(peak*(1+soakTopOvershoot)) + 1
	ramp, hold := time.Duration(0.35*float64(c.Cycle)), time.Duration(0.15*float64(c.Cycle))
	phase, since := waveUp, time.Now()
	if warm {
		phase = waveTop
	}
	atTop := false
	var churn float64
	last := time.Now()
	for {
		var now time.Time
		select {
		case <-done:
			return
		case now = <-tick.C:
		}
		eng := int64(l.engineNow())
		maxStore(&l.peakEngine, eng)
		el := now.Sub(since)
		var target float64
		paused := false
		switch phase {
		case waveUp:
			target = low + (top-low)*min(1, el.Seconds()/ramp.Seconds())
			if el >= ramp {
				phase, since, atTop = waveTop, now, false
			}
		case waveTop:
			target = top
			if !atTop {
				paused = true
				if l.open.Load() >= int64(c.PeakConns) && eng >= int64(c.PeakConns) {
					atTop, since = true, now
					l.peaksReached.Add(1)
					if warm {
						close(reached)
						return
					}
				}
			} else if el >= hold {
				phase, since = waveDown, now
			}
		case waveDown:
			target = top - (top-low)*min(1, el.Seconds()/ramp.Seconds())
			if el >= ramp {
				phase, since = waveBottom, now
			}
		case waveBottom:
			target = low
			if el >= hold {
				phase, since = waveUp, now
			}
		}
		churn += c.Churn * now.Sub(last).Seconds()
		last = now
		n := int64(churn)
		churn -= float64(n)
		if paused {
			n = 0
		}
		active := l.active.Load()
		ended := l.signal(int(n+max(0, active-int64(target))), rng)
		active -= int64(ended)
		opens := n + max(0, int64(target)-active)
		opens = min(opens, soakMaxDialing-l.dialing.Load())
		for range opens {
			l.begin(rng, done)
		}
	}
}

// signal tells up to n random established connections to end, and
// returns how many it told.
func (l *streamLoad) signal(n int, rng *rand.Rand) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	told := 0
	for ; told < n && len(l.live) > 0; told++ {
		j := rng.IntN(len(l.live))
		sc := l.live[j]
		l.removeLocked(sc)
		close(sc.stop)
	}
	return told
}

func (l *streamLoad) removeLocked(sc *soakConn) {
	if sc.idx < 0 {
		return
	}
	last := len(l.live) - 1
	l.live[sc.idx] = l.live[last]
	l.live[sc.idx].idx = sc.idx
	l.live[last] = nil
	l.live = l.live[:last]
	sc.idx = -1
}

// begin starts the next connection, choosing its network, its end and
// how much it writes. Only the driver calls it.
func (l *streamLoad) begin(rng *rand.Rand, done <-chan struct{}) {
	k := l.seq
	l.seq++
	network, mix := "tcp", &tcpEndMix
	if rng.Float64() < l.cfg.UnixShare {
		network, mix = "unix", &unixEndMix
	}
	end := pickEnd(rng, mix)
	var total int64
	if rng.IntN(10) > 0 {
		total = logUniform(rng, int64(l.cfg.ConnBytes))
	}
	l.active.Add(1)
	l.dialing.Add(1)
	l.connWG.Add(1)
	go l.conn(k, network, end, total, done)
}

func pickEnd(rng *rand.Rand, mix *[numEnds]int) connEnd {
	x := rng.IntN(1000)
	for e, w := range mix {
		if x < w {
			return connEnd(e)
		}
		x -= w
	}
	return endClose
}

// conn is connection k's goroutine: dial, write, wait to be told to end
// (an aborting connection does not wait), end, and hand the record of
// what it wrote to the checker.
func (l *streamLoad) conn(k uint64, network string, end connEnd, total int64, done <-chan struct{}) {
	defer l.connWG.Done()
	defer l.active.Add(-1)
	c, err := l.dial(k, network)
	l.dialing.Add(-1)
	if err != nil {
		l.dialErrs.Add(1)
		l.mu.Lock()
		if l.dialErr == nil {
			l.dialErr = err
		}
		l.mu.Unlock()
		return
	}
	if network == "tcp" {
		l.tcp.Add(1)
	} else {
		l.unix.Add(1)
	}
	rec := &clientRec{name: network + "://" + c.LocalAddr().String(), k: k, end: end}
	l.chk.clientOpened(rec)
	sc := &soakConn{stop: make(chan struct{})}
	l.mu.Lock()
	sc.idx = len(l.live)
	l.live = append(l.live, sc)
	l.mu.Unlock()
	l.opened.Add(1)
	maxStore(&l.peak, l.open.Add(1))

	l.write(c, rec, sc, total, done)
	if end != endAbort {
		select {
		case <-sc.stop:
		case <-done:
		}
	}
	l.mu.Lock()
	l.removeLocked(sc)
	l.mu.Unlock()
	l.finish(c, rec)
	l.chk.clientDone(rec)
	l.written.Add(uint64(rec.written))
	l.ends[end].Add(1)
	l.open.Add(-1)
	l.closed.Add(1)
}

// write sends up to total bytes of the connection's stream in random
// write sizes, stopping early when the connection is told to end; an
// aborting connection stops at a random point.
func (l *streamLoad) write(c net.Conn, rec *clientRec, sc *soakConn, total int64, done <-chan struct{}) {
	if total == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(l.cfg.Seed^0x5717e5, rec.k))
	cut := total
	if rec.end == endAbort {
		cut = 1 + rng.Int64N(total)
	}
	gen := newSoakStream(l.cfg.Seed, rec.k)
	bp := l.bufs.Get().(*[]byte)
	defer l.bufs.Put(bp)
	for rec.written < cut {
		select {
		case <-sc.stop:
			return
		case <-done:
			return
		default:
		}
		b := (*bp)[:min(logUniform(rng, soakMaxWrite), cut-rec.written)]
		gen.fill(b)
		n, err := c.Write(b)
		rec.crc = crc32.Update(rec.crc, castagnoli, b[:n])
		rec.written += int64(n)
		if err != nil {
			rec.problem = fmt.Sprintf("write after %d bytes: %v", rec.written, err)
			return
		}
	}
}

// finish ends the connection the way rec.end says (see connEnd).
func (l *streamLoad) finish(c net.Conn, rec *clientRec) {
	defer c.Close()
	switch rec.end {
	case endReset:
		deadline := time.Now().Add(l.cfg.Settle)
		for d := time.Millisecond; ; d = min(2*d, 20*time.Millisecond) {
			q, err := sendQueued(c)
			if err != nil {
				rec.problem = fmt.Sprintf("reading the send queue: %v", err)
				return
			}
			if q == 0 {
				break
			}
			if time.Now().After(deadline) {
				rec.problem = fmt.Sprintf("%d bytes still unacknowledged after %v: the engine stopped reading", q, l.cfg.Settle)
				return
			}
			time.Sleep(d)
		}
		c.(*net.TCPConn).SetLinger(0)
	case endAbort:
		q, err := sendQueued(c)
		if err != nil {
			rec.problem = fmt.Sprintf("reading the send queue: %v", err)
			return
		}
		rec.unacked = int64(q)
		c.(*net.TCPConn).SetLinger(0)
	case endHalfClose:
		if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			rec.problem = fmt.Sprintf("shutdown: %v", err)
			return
		}
		c.SetReadDeadline(time.Now().Add(l.cfg.Settle))
		var one [1]byte
		n, err := c.Read(one[:])
		switch {
		case n > 0:
			rec.problem = "the engine wrote to a half-closed connection"
		case errors.Is(err, io.EOF):
		case errors.Is(err, syscall.ECONNRESET):
			rec.problem = "the engine reset a half-closed connection instead of closing it"
		default:
			rec.problem = fmt.Sprintf("waiting for the engine to close a half-closed connection: %v", err)
		}
	}
}

// dial connects connection k from a local address of its own. A unix
// connect refused for a full backlog (EAGAIN) is tried again: the
// listener is behind, which the soak measures but does not fail on.
func (l *streamLoad) dial(k uint64, network string) (net.Conn, error) {
	d := net.Dialer{Timeout: l.cfg.Settle}
	if network == "tcp" {
		d.LocalAddr = &net.TCPAddr{IP: soakLocalIP(k)}
		d.Control = noPortAtBind
		return d.Dial("tcp", l.tcpAddr)
	}
	d.LocalAddr = &net.UnixAddr{Name: fmt.Sprintf("%s%d", l.nonce, k), Net: "unix"}
	deadline := time.Now().Add(l.cfg.Settle)
	for {
		c, err := d.Dial("unix", l.unixAddr)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			return c, err
		}
		l.dialRetries.Add(1)
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *streamLoad) firstDialErr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dialErr == nil {
		return "none"
	}
	return l.dialErr.Error()
}

// maxStore raises a to v if v is larger.
func maxStore(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}
