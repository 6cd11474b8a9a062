package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/srcs"
	"golang.org/x/sys/unix"
)

// crc32c is the CRC-32C table of the load's checksums.
var crc32c = crc32.MakeTable(crc32.Castagnoli)

// GenConfig configures the load generator, which `run` and `latency`
// start in a process of their own (the hidden `gen` subcommand) so that
// its CPU time is not charged to the engine.
type GenConfig struct {
	Addr     string        // the sink's host:port
	Sources  int           // TCP connections
	Duration time.Duration // how long to send
	MsgSize  report.Size   // fixed message size, at least TimestampSize
	Rate     report.Rate   // mean bytes per second per source; 0: as fast as possible
	Arrivals string        // ArrivalsPoisson or ArrivalsUniform, when Rate > 0
	Skew     float64       // biased connections, see SkewWeights; needs Rate
	MaxDial  int           // concurrent dials
	Seed     uint64        // pacing seed
	// Wait makes the generator announce "ready" once every connection is
	// up and then wait for a line on its input before sending, so that the
	// parent measures only the sending.
	Wait bool
	// CPUs pins the generator's threads, when not empty.
	CPUs []int
	// NoCRC skips the CRC-32C of what is sent (the report's crc32c is
	// then empty): when nothing will be verified, it is a third of the
	// generator's CPU on one bulk stream.
	NoCRC bool
	// Pacing is how a paced generator turns arrivals into writes:
	// PacingSpread (the default, also for "") or PacingBatch.
	Pacing string
	// Framing, unless "" or "none", makes every message one record for
	// that framer (srcs.ParseFraming), encoded by FrameMessage. Framed
	// messages carry no timestamps: the lag is still measured in the
	// generator, from schedules it keeps aside. When the duration ends an
	// unpaced generator finishes the record it began (a paced one writes
	// whole messages anyway), so that every stream ends on a record
	// boundary.
	Framing string
	// TLSCA, when set, makes every connection a TLS session verified
	// against this CA file (run --tls): the handshakes happen before
	// "ready", and each connection is written by a goroutine of its own
	// (see runTLSBulk). Unpaced only.
	TLSCA string
}

// genBudget caps the generator's unsent bytes of unpaced sources, over
// all of them; bulkWriteMax caps one write.
const (
	genBudget    = 256 << 20
	bulkWriteMax = 1 << 20
	bulkSndBuf   = 4 << 20 // SO_SNDBUF of unpaced sources when there are few
	fewSources   = 16
)

// Pacing of the paced generator: how arrivals become writes.
const (
	// PacingSpread writes every message on its own, at its own time, as
	// independent senders do: the shard sleeps (with a timer slack of
	// 1 ns) until the next arrival, writes that one message, and looks
	// again; only a connection whose socket is full gets several messages
	// in one write. Messages come due while it writes only when it is
	// behind, and then go out one write each, at once.
	PacingSpread = "spread"
	// PacingBatch is the bursty pacing, for comparison: the shard
	// sleeps until the earliest arrival with the default timer slack
	// (50 µs), then writes every message due by then, back to back, with
	// the messages due on one connection in one write. Its load comes in
	// bursts of back-to-back writes, which a batching engine serves with
	// fewer wake-ups than independent senders allow
	// (docs/decisions/0009-generator-spread-pacing.md).
	PacingBatch = "batch"
	// DefaultPacing is the generator's default.
	DefaultPacing = PacingSpread
)

// PacingHelp describes the pacings for the flags that take one.
const PacingHelp = "spread (every message its own write at its own time, as independent senders) or " +
	"batch (every message due when the generator wakes, back to back, one write per connection)"

// FlushGrace bounds how long after Duration the generator keeps writing
// what it had scheduled before Duration but could not write yet.
const FlushGrace = 5 * time.Second

// GenStream is what the generator sent on one connection.
type GenStream struct {
	Local    string  `json:"local"` // the connection's local address: the sink's peer
	Bytes    uint64  `json:"bytes"`
	CRC32C   string  `json:"crc32c"`
	Messages uint64  `json:"messages"`
	Weight   float64 `json:"weight"` // share of the offered load (SkewWeights)
}

// GenReport is the generator's final line.
type GenReport struct {
	Event     string `json:"event"` // "done"
	Sources   int    `json:"sources"`
	SentBytes uint64 `json:"sent_bytes"`
	// ScheduledBytes are the bytes of every message whose arrival fell
	// within Duration (with a rate; the offered load as drawn), and
	// OnTimeBytes those written by Duration after the start: the
	// generator held the offered load when the two are close.
	ScheduledBytes uint64  `json:"scheduled_bytes"`
	OnTimeBytes    uint64  `json:"on_time_bytes"`
	ElapsedS       float64 `json:"elapsed_s"`
	DurationS      float64 `json:"duration_s"`
	OfferedBps     float64 `json:"offered_bps"` // 0: unlimited
	CPUS           float64 `json:"cpu_s"`       // the generator's own CPU time
	CPUs           int     `json:"cpus"`        // CPUs it may use (GOMAXPROCS)
	Shards         int     `json:"shards"`      // sender threads
	// Preemptions counts involuntary context switches while sending, and
	// RunqueueWaitS the time its threads were runnable but not running
	// (Linux schedstat): the latter is what a neighbour competing for the
	// generator's CPUs shows as.
	Preemptions   int64   `json:"preemptions"`
	RunqueueWaitS float64 `json:"runqueue_wait_s"`
	// Writes counts the writes that sent bytes: one per message with the
	// spread pacing (unless a socket was full), fewer with batch.
	Writes uint64 `json:"writes"`
	// Lag is each message's actual write time minus its scheduled time
	// (HdrHistogram), the generator's own lateness.
	LagNs    report.Latency `json:"lag_ns"`
	LagMaxNs int64          `json:"lag_max_ns"`
	// TLS is the sessions' TLS version and cipher suite, with TLSCA.
	TLS     string      `json:"tls,omitempty"`
	Streams []GenStream `json:"streams"`
}

// HeldFraction is the fraction of the offered load written on time, or 1
// without a rate. It compares with the arrivals actually drawn, not with
// their mean, so that a small Poisson load is not judged by chance.
func (r GenReport) HeldFraction() float64 {
	if r.OfferedBps <= 0 || r.ScheduledBytes == 0 {
		return 1
	}
	return float64(r.OnTimeBytes) / float64(r.ScheduledBytes)
}

// GenEvent is the generator's "ready" line.
type GenEvent struct {
	Event   string `json:"event"`
	Sources int    `json:"sources"`
}

// DefaultGenConfig returns the generator's defaults.
func DefaultGenConfig() GenConfig {
	return GenConfig{Sources: DefaultRunSources, Duration: DefaultRunDuration, MsgSize: DefaultRunMsgSize,
		Arrivals: ArrivalsPoisson, MaxDial: DefaultMaxDial}
}

// RegisterFlags defines c's flags on fs.
func (c *GenConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "the sink's `HOST:PORT`")
	fs.IntVar(&c.Sources, "sources", c.Sources, "TCP connections")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to send")
	fs.Var(&c.MsgSize, "msg-size", "fixed message size")
	fs.Var(&c.Rate, "rate", "mean bytes per second per source (default unlimited)")
	fs.StringVar(&c.Arrivals, "arrivals", c.Arrivals, "poisson or uniform")
	fs.StringVar(&c.Pacing, "pacing", c.Pacing, "with --rate: "+PacingHelp+" (default "+DefaultPacing+")")
	fs.Float64Var(&c.Skew, "skew", c.Skew, "biased connections (needs --rate)")
	fs.IntVar(&c.MaxDial, "max-dial", c.MaxDial, "concurrent dials")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "pacing seed")
	fs.BoolVar(&c.NoCRC, "no-crc", c.NoCRC, "do not checksum what is sent")
	fs.StringVar(&c.Framing, "framing", "none", "send each message as one record for this framer (see run --framing), without timestamps")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "dial TLS, verifying the sink against this CA `FILE` (unpaced only)")
	fs.BoolVar(&c.Wait, "wait", c.Wait, "announce ready on stdout and wait for a line on stdin before sending")
	fs.Func("cpus", "pin to these comma-separated `CPUS`", func(v string) error {
		c.CPUs = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return fmt.Errorf("bad CPU %q", f)
			}
			c.CPUs = append(c.CPUs, n)
		}
		return nil
	})
}

// Validate checks a generator configuration, naming the flag at fault.
func (c GenConfig) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("--addr: required")
	case c.Sources < 1:
		return fmt.Errorf("--sources: %d: must be at least 1", c.Sources)
	case c.Duration <= 0:
		return fmt.Errorf("--duration: %v: must be positive", c.Duration)
	case c.MsgSize < TimestampSize || c.MsgSize > 16<<20:
		return fmt.Errorf("--msg-size: %d: must be from %d bytes to 16MiB", c.MsgSize, TimestampSize)
	case c.Rate < 0:
		return fmt.Errorf("--rate: must not be negative")
	case c.Arrivals != ArrivalsPoisson && c.Arrivals != ArrivalsUniform:
		return fmt.Errorf("--arrivals: %q: must be poisson or uniform", c.Arrivals)
	case c.Skew < 0 || c.Skew >= 1:
		return fmt.Errorf("--skew: %v: must be in [0, 1)", c.Skew)
	case c.Skew > 0 && c.Rate == 0:
		return errors.New("--skew: needs --rate (shares of an unlimited rate are not defined)")
	case c.MaxDial < 1:
		return fmt.Errorf("--max-dial: %d: must be at least 1", c.MaxDial)
	case c.Pacing != "" && c.Pacing != PacingSpread && c.Pacing != PacingBatch:
		return fmt.Errorf("--pacing: %q: must be spread or batch", c.Pacing)
	case c.TLSCA != "" && c.Rate > 0:
		return errors.New("--tls-ca: unpaced only (no --rate)")
	}
	f, err := srcs.ParseFraming(c.Framing)
	if err != nil {
		return fmt.Errorf("--framing: %v", err)
	}
	if f != nil {
		if err := CheckRecord(f, int(c.MsgSize), 0); err != nil {
			return fmt.Errorf("--framing %s: no record of --msg-size %d bytes: %v", f, c.MsgSize, err)
		}
	}
	return nil
}

// RunGen runs the generator: it dials every connection, announces ready
// (with Wait, then waits for a line on in), sends for Duration, closes the
// connections, and writes its GenReport as one JSON line to out.
//
// The sources are split into shards, one per CPU the generator may use;
// each shard is a goroutine locked to its OS thread that owns its
// connections outright: it keeps their arrivals in a min-heap, appends
// every message that is due on a connection to that connection's unsent
// bytes, and writes them with one non-blocking write on the raw
// descriptor. A short write keeps the unsent tail for the next turn, so
// nothing is lost or reordered; when every connection with bytes to write
// is full, the shard waits in poll. There is no goroutine or timer per
// source: a generator with them is its own bottleneck at about 64,000
// paced writes per second.
func RunGen(ctx context.Context, cfg GenConfig, in io.Reader, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	framer, _ := srcs.ParseFraming(cfg.Framing)
	if len(cfg.CPUs) > 0 {
		if err := harness.PinProcess(cfg.CPUs); err != nil {
			return err
		}
		runtime.GOMAXPROCS(len(cfg.CPUs))
	}
	conns, err := dialAll(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	size := int(cfg.MsgSize)
	weights := SkewWeights(cfg.Sources, cfg.Skew)
	batch := size
	if cfg.Rate == 0 {
		batch = max(1, min(bulkWriteMax, genBudget/cfg.Sources)/size) * size
	}
	gcs := make([]*genConn, len(conns))
	for i, c := range conns {
		gc, err := newGenConn(cfg, i, c, weights[i], batch, framer)
		if err != nil {
			return err
		}
		gcs[i] = gc
	}
	enc := json.NewEncoder(out)
	if cfg.Wait {
		if err := enc.Encode(GenEvent{Event: "ready", Sources: len(conns)}); err != nil {
			return fmt.Errorf("bench: gen: %w", err)
		}
		if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
			return fmt.Errorf("bench: gen: waiting for go: %w", err)
		}
	}
	nShards := max(1, min(runtime.GOMAXPROCS(0), len(gcs)))
	if cfg.TLSCA != "" {
		nShards = 0 // a goroutine per connection instead
	}
	rep := GenReport{Event: "done", Sources: cfg.Sources, Streams: make([]GenStream, cfg.Sources),
		DurationS: cfg.Duration.Seconds(), CPUs: runtime.GOMAXPROCS(0), Shards: nShards, TLS: tlsSession(conns[0])}
	if cfg.Rate > 0 {
		rep.OfferedBps = float64(cfg.Rate) * float64(cfg.Sources)
	}
	cpu0, pre0, rq0 := harness.CPUTime(), harness.Preemptions(), harness.RunqueueWait()
	start := time.Now()
	shards := make([]*genShard, nShards)
	for i := range shards {
		shards[i] = &genShard{size: size, base: start.UnixNano(), dur: cfg.Duration.Nanoseconds(),
			paced: cfg.Rate > 0, spread: cfg.Pacing != PacingBatch, framed: framer != nil, crc: !cfg.NoCRC, lag: report.NewHist()}
	}
	for i, gc := range gcs {
		if nShards > 0 {
			shards[i%nShards].conns = append(shards[i%nShards].conns, gc)
		}
	}
	var wg sync.WaitGroup
	for _, sh := range shards {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if sh.paced && sh.spread {
				// Sleep until each arrival, not up to 50 µs past it,
				// which would gather the arrivals into bursts.
				harness.SetTimerSlack(1)
			}
			sh.run(ctx)
		})
	}
	wg.Wait()
	var tlsMsgs uint64
	if cfg.TLSCA != "" {
		rep.Writes, tlsMsgs = runTLSBulk(gcs, conns, size, framer != nil, !cfg.NoCRC, start, cfg.Duration)
	}
	for _, c := range conns {
		c.Close()
	}
	rep.ElapsedS = time.Since(start).Seconds()
	rep.CPUS = (harness.CPUTime() - cpu0).Seconds()
	rep.Preemptions = harness.Preemptions() - pre0
	rep.RunqueueWaitS = (harness.RunqueueWait() - rq0).Seconds()
	lag := report.NewHist()
	for _, sh := range shards {
		lag.Merge(sh.lag)
		rep.Writes += sh.writes
	}
	lag.RecordValues(0, int64(tlsMsgs)) // unpaced: each written when offered
	rep.LagNs = report.Summarize(lag)
	rep.LagMaxNs = rep.LagNs.Max
	for i, gc := range gcs {
		rep.Streams[i] = GenStream{Local: gc.local, Bytes: gc.bytes, Messages: gc.msgs, Weight: gc.weight}
		if !cfg.NoCRC {
			rep.Streams[i].CRC32C = fmt.Sprintf("%08x", gc.crc)
		}
		rep.SentBytes += gc.bytes
		rep.OnTimeBytes += gc.onTime
		rep.ScheduledBytes += gc.scheduled
	}
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("bench: gen: %w", err)
	}
	return ctx.Err()
}

// dialAll opens cfg.Sources connections, at most cfg.MaxDial at a time.
func dialAll(ctx context.Context, cfg GenConfig) ([]net.Conn, error) {
	var tc *tls.Config
	if cfg.TLSCA != "" {
		var err error
		if tc, err = genTLSConfig(cfg.TLSCA); err != nil {
			return nil, err
		}
	}
	conns := make([]net.Conn, cfg.Sources)
	errs := make([]error, cfg.Sources)
	sem := make(chan struct{}, cfg.MaxDial)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d := net.Dialer{Timeout: 10 * time.Second}
			for attempt := 0; ; attempt++ {
				c, err := d.DialContext(ctx, "tcp", cfg.Addr)
				if err == nil && tc != nil {
					c, err = tlsHandshake(ctx, c, tc)
				}
				if err == nil {
					conns[i] = c
					return
				}
				if attempt == 4 || ctx.Err() != nil {
					errs[i] = err
					return
				}
				time.Sleep(time.Duration(50<<attempt) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, fmt.Errorf("bench: gen: dial %s: %w", cfg.Addr, err)
	}
	return conns, nil
}

// genConn is one connection of the generator, owned by one shard.
type genConn struct {
	local  string
	fd     int
	weight float64
	pacer  *pacer // nil: unpaced
	due    int64  // next arrival, UnixNano (paced)
	hidx   int    // index in the shard's heap; -1 when not in it
	dirty  bool   // in the shard's list of connections with unsent bytes
	dead   bool   // a write failed; stop
	tmpl   []byte // the payload: one message (paced) or a write's worth (unpaced)
	back   []byte // pend's backing array (paced)
	pend   []byte // scheduled bytes not yet written
	phase  int    // offset of pend[0] within its message
	// scheds holds, for framed paced messages, which have no header to
	// stamp, the schedules of the messages in pend not yet begun, from
	// scheds[sched0] on.
	scheds []int64
	sched0 int
	crc    uint32
	bytes  uint64
	onTime uint64
	msgs   uint64
	// scheduled counts the bytes of the arrivals within the duration.
	scheduled uint64
}

func newGenConn(cfg GenConfig, i int, c net.Conn, weight float64, batch int, framer srcs.Framer) (*genConn, error) {
	size := int(cfg.MsgSize)
	gc := &genConn{local: c.LocalAddr().String(), weight: weight, hidx: -1, fd: -1}
	if s, ok := c.(*tls.Conn); ok {
		c = s.NetConn() // socket options; runTLSBulk writes through s
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, errors.New("bench: gen: not a TCP connection")
	}
	if cfg.Rate == 0 && cfg.Sources <= fewSources {
		tc.SetWriteBuffer(bulkSndBuf) // best effort: the kernel caps it at wmem_max
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("bench: gen: %w", err)
	}
	// The descriptor stays open until RunGen closes c, after every shard
	// has stopped; Go made it non-blocking.
	if err := rc.Control(func(fd uintptr) { gc.fd = int(fd) }); err != nil {
		return nil, fmt.Errorf("bench: gen: %w", err)
	}
	gc.tmpl = make([]byte, batch)
	for j := range gc.tmpl {
		gc.tmpl[j] = byte(j%size*7 + i)
	}
	if framer != nil {
		// Every message of the template is the same record.
		if err := FrameMessage(framer, gc.tmpl[:size]); err != nil {
			return nil, fmt.Errorf("bench: gen: %w", err)
		}
		for j := size; j < batch; j += size {
			copy(gc.tmpl[j:j+size], gc.tmpl[:size])
		}
	}
	if cfg.Rate > 0 {
		gc.pacer, err = NewPacer(cfg.Arrivals, float64(cfg.Rate)*weight, size, cfg.Seed^uint64(i)*0x9e3779b97f4a7c15)
		if err != nil {
			return nil, err
		}
		gc.back = make([]byte, 0, 4*size)
		gc.pend = gc.back
	}
	return gc, nil
}

// genShard is one sender thread's share of the connections. Not safe for
// concurrent use: one goroutine, locked to its thread, runs it.
type genShard struct {
	size   int
	base   int64 // start, UnixNano
	dur    int64 // sending time, ns
	paced  bool
	spread bool // PacingSpread: a write per message, at its time
	framed bool // records without headers: nothing to stamp
	crc    bool
	conns  []*genConn
	heap   []*genConn // paced: by due
	dirty  []*genConn // connections with unsent bytes
	lag    *hdrhistogram.Histogram
	pfds   []unix.PollFd
	writes uint64 // writes that sent bytes
}

func (sh *genShard) run(ctx context.Context) {
	if sh.paced {
		sh.runPaced(ctx)
	} else {
		sh.runBulk(ctx)
	}
}

// write writes c's unsent bytes once, stamping the send time into every
// header not yet begun (framed messages have none), and says whether any
// byte went out.
func (sh *genShard) write(c *genConn, now int64) bool {
	if len(c.pend) == 0 || c.dead {
		return false
	}
	first := 0
	if c.phase != 0 {
		first = sh.size - c.phase // a header already begun keeps its stamp
	}
	if !sh.framed {
		for i := first; i < len(c.pend); i += sh.size {
			binary.LittleEndian.PutUint64(c.pend[i+SentOff:], uint64(now))
			if !sh.paced {
				// Unpaced messages are offered when the generator can write them.
				binary.LittleEndian.PutUint64(c.pend[i+SchedOff:], uint64(now))
			}
		}
	}
	n, err := unix.Write(c.fd, c.pend)
	if n > 0 {
		sh.writes++
		for i := first; i < n; i += sh.size {
			sched := now // unpaced: offered now
			switch {
			case !sh.framed:
				sched = int64(binary.LittleEndian.Uint64(c.pend[i+SchedOff:]))
			case sh.paced:
				sched = c.scheds[c.sched0]
				c.sched0++
			}
			sh.lag.RecordValue(clampLat(now - sched))
			c.msgs++
		}
		if sh.crc {
			c.crc = crc32.Update(c.crc, crc32c, c.pend[:n])
		}
		c.bytes += uint64(n)
		if now-sh.base <= sh.dur {
			c.onTime += uint64(n)
		}
		c.pend = c.pend[n:]
		c.phase = (c.phase + n) % sh.size
		if len(c.pend) == 0 && c.back != nil {
			c.pend = c.back[:0]
			c.scheds, c.sched0 = c.scheds[:0], 0
		}
	}
	if err != nil && err != unix.EAGAIN && err != unix.EINTR {
		c.dead = true
	}
	return n > 0
}

// runBulk writes as fast as the connections take it until the duration
// ends. Every write is a whole buffer of messages stamped just before it.
// Framed, it then finishes the record each connection began.
func (sh *genShard) runBulk(ctx context.Context) {
	end := sh.base + sh.dur
	live := len(sh.conns)
	for ctx.Err() == nil && live > 0 {
		now := time.Now().UnixNano()
		if now >= end {
			if sh.framed {
				sh.finishRecords(ctx, end+FlushGrace.Nanoseconds())
			}
			return
		}
		progress := false
		for _, c := range sh.conns {
			if c.dead {
				continue
			}
			if len(c.pend) == 0 {
				c.pend, c.phase = c.tmpl, 0
			}
			if sh.write(c, now) {
				progress = true
			}
			if c.dead {
				live--
			}
		}
		if !progress {
			sh.waitWritable(sh.conns, end-now)
		}
	}
}

// finishRecords writes the rest of the record each connection is in the
// middle of, until hardEnd at the latest, so that its stream ends on a
// record boundary.
func (sh *genShard) finishRecords(ctx context.Context, hardEnd int64) {
	var open []*genConn
	for _, c := range sh.conns {
		if c.phase != 0 && !c.dead {
			c.pend = c.pend[:sh.size-c.phase]
			open = append(open, c)
		}
	}
	for len(open) > 0 && ctx.Err() == nil {
		now := time.Now().UnixNano()
		if now >= hardEnd {
			return
		}
		keep := open[:0]
		for _, c := range open {
			sh.write(c, now)
			if len(c.pend) > 0 && !c.dead {
				keep = append(keep, c)
			}
		}
		open = keep
		if len(open) > 0 {
			sh.waitWritable(open, hardEnd-now)
		}
	}
}

// runPaced sends every source's arrivals until the duration ends, then
// what is still unsent, for at most FlushGrace.
func (sh *genShard) runPaced(ctx context.Context) {
	for _, c := range sh.conns {
		if p := c.pacer.peek(); p < sh.dur {
			c.due = sh.base + p
			sh.push(c)
		}
	}
	hardEnd := sh.base + sh.dur + FlushGrace.Nanoseconds()
	for ctx.Err() == nil {
		now := time.Now().UnixNano()
		if now >= hardEnd || (len(sh.heap) == 0 && len(sh.dirty) == 0) {
			return
		}
		if sh.spread {
			if len(sh.heap) > 0 && sh.heap[0].due <= now {
				c := sh.heap[0]
				if c.dead {
					sh.pop()
					continue
				}
				sh.take(c, now)
				sh.write(c, time.Now().UnixNano())
				if len(c.pend) > 0 && !c.dirty && !c.dead {
					// Its socket is full: wait for room with the others.
					c.dirty = true
					sh.dirty = append(sh.dirty, c)
				}
				continue
			}
		} else {
			for len(sh.heap) > 0 && sh.heap[0].due <= now {
				c := sh.heap[0]
				if c.dead {
					sh.pop() // its connection failed: nothing more to schedule
					continue
				}
				sh.take(c, now)
				if !c.dirty && !c.dead {
					c.dirty = true
					sh.dirty = append(sh.dirty, c)
				}
			}
		}
		now = time.Now().UnixNano()
		keep := sh.dirty[:0]
		for _, c := range sh.dirty {
			sh.write(c, now)
			if len(c.pend) > 0 && !c.dead {
				keep = append(keep, c)
			} else {
				c.dirty = false
			}
		}
		clear(sh.dirty[len(keep):])
		sh.dirty = keep
		if len(sh.heap) == 0 && len(sh.dirty) == 0 {
			return
		}
		wait := hardEnd - now
		if len(sh.heap) > 0 {
			wait = min(wait, sh.heap[0].due-time.Now().UnixNano())
		}
		if len(sh.dirty) > 0 {
			sh.waitWritable(sh.dirty, wait)
		} else if wait > 0 {
			// Block this locked thread in the kernel rather than park the
			// goroutine on a Go timer: a timer wake-up comes hundreds of
			// microseconds late, and that would be generator lag.
			harness.PollFds(nil, time.Duration(wait))
		}
	}
}

// take appends the arrivals of c, the head of the shard's heap, due by
// now to its unsent bytes, with their schedules, and moves c to its next
// arrival in the heap (or out of it). Spread pacing takes one arrival at
// a time, batch pacing every one due.
func (sh *genShard) take(c *genConn, now int64) {
	for p := c.pacer.peek(); p < sh.dur && sh.base+p <= now; p = c.pacer.peek() {
		off := len(c.pend)
		if off+sh.size > cap(c.pend) {
			grown := append(c.pend, c.tmpl...)
			c.back = grown[:0]
			c.pend = grown
		} else {
			c.pend = append(c.pend, c.tmpl...)
		}
		if sched := sh.base + c.pacer.Advance(); sh.framed {
			if c.sched0 >= 1024 && 2*c.sched0 >= len(c.scheds) {
				// A connection that never catches up: drop the
				// schedules already used.
				c.scheds = c.scheds[:copy(c.scheds, c.scheds[c.sched0:])]
				c.sched0 = 0
			}
			c.scheds = append(c.scheds, sched)
		} else {
			binary.LittleEndian.PutUint64(c.pend[off+SchedOff:], uint64(sched))
		}
		c.scheduled += uint64(sh.size)
		if sh.spread {
			break
		}
	}
	if p := c.pacer.peek(); p < sh.dur {
		c.due = sh.base + p
		sh.fix(0)
	} else {
		sh.pop()
	}
}

// waitWritable waits until one of cs can take bytes, or for at most d ns.
func (sh *genShard) waitWritable(cs []*genConn, d int64) {
	if d <= 0 {
		return
	}
	sh.pfds = sh.pfds[:0]
	for _, c := range cs {
		if !c.dead {
			sh.pfds = append(sh.pfds, unix.PollFd{Fd: int32(c.fd), Events: unix.POLLOUT})
		}
	}
	if len(sh.pfds) == 0 {
		return
	}
	harness.PollFds(sh.pfds, time.Duration(d))
}

// The shard's min-heap of paced connections by due time.

func (sh *genShard) less(i, j int) bool { return sh.heap[i].due < sh.heap[j].due }

func (sh *genShard) swap(i, j int) {
	h := sh.heap
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}

func (sh *genShard) push(c *genConn) {
	c.hidx = len(sh.heap)
	sh.heap = append(sh.heap, c)
	sh.up(c.hidx)
}

func (sh *genShard) pop() {
	n := len(sh.heap) - 1
	sh.swap(0, n)
	sh.heap[n].hidx = -1
	sh.heap[n] = nil
	sh.heap = sh.heap[:n]
	if n > 0 {
		sh.down(0)
	}
}

func (sh *genShard) fix(i int) {
	if !sh.down(i) {
		sh.up(i)
	}
}

func (sh *genShard) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !sh.less(j, i) {
			break
		}
		sh.swap(i, j)
		j = i
	}
}

func (sh *genShard) down(i0 int) bool {
	i, n := i0, len(sh.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && sh.less(r, l) {
			j = r
		}
		if !sh.less(j, i) {
			break
		}
		sh.swap(i, j)
		i = j
	}
	return i > i0
}

// Defaults of `run`: what `make bench` runs. 200 sources for 5 s per
// runner, 16 KiB messages, unlimited rate, one round. With four runners
// that is about 30 s of measuring, so that the whole job, build included,
// stays well under two minutes on a 2-core machine. Targets are measured
// with explicit flags.
const (
	DefaultRunSources  = 200
	DefaultRunDuration = 5 * time.Second
	DefaultRunMsgSize  = 16 << 10
	DefaultMaxDial     = 64
)
