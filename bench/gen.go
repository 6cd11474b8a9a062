package bench

import (
	"bufio"
	"context"
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
)

// GenConfig configures the load generator, which `run` and `latency`
// start in a process of their own (the hidden `gen` subcommand) so that
// its CPU time is not charged to the engine.
type GenConfig struct {
	Addr     string        // the sink's host:port
	Sources  int           // TCP connections
	Duration time.Duration // how long to send
	MsgSize  Size          // fixed message size, at least TimestampSize
	Rate     Rate          // mean bytes per second per source; 0: as fast as possible
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
}

// genBudget caps the generator's send buffers over all sources.
const genBudget = 256 << 20

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
	Event      string      `json:"event"` // "done"
	Sources    int         `json:"sources"`
	SentBytes  uint64      `json:"sent_bytes"`
	ElapsedS   float64     `json:"elapsed_s"`
	OfferedBps float64     `json:"offered_bps"` // 0: unlimited
	CPUS       float64     `json:"cpu_s"`       // the generator's own CPU time
	LagMaxNs   int64       `json:"lag_max_ns"`  // worst lateness of a paced write
	LagMeanNs  int64       `json:"lag_mean_ns"`
	Streams    []GenStream `json:"streams"`
}

// genEvent is the generator's "ready" line.
type genEvent struct {
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
	fs.Float64Var(&c.Skew, "skew", c.Skew, "biased connections (needs --rate)")
	fs.IntVar(&c.MaxDial, "max-dial", c.MaxDial, "concurrent dials")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "pacing seed")
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
	}
	return nil
}

// RunGen runs the generator: it dials every connection, announces ready
// (with Wait, then waits for a line on in), sends for Duration, closes the
// connections, and writes its GenReport as one JSON line to out.
func RunGen(ctx context.Context, cfg GenConfig, in io.Reader, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if len(cfg.CPUs) > 0 {
		if err := pinProcess(cfg.CPUs); err != nil {
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
	enc := json.NewEncoder(out)
	if cfg.Wait {
		if err := enc.Encode(genEvent{Event: "ready", Sources: len(conns)}); err != nil {
			return fmt.Errorf("bench: gen: %w", err)
		}
		if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
			return fmt.Errorf("bench: gen: waiting for go: %w", err)
		}
	}
	cpu0 := cpuTime()
	weights := SkewWeights(cfg.Sources, cfg.Skew)
	rep := GenReport{Event: "done", Sources: cfg.Sources, Streams: make([]GenStream, cfg.Sources)}
	if cfg.Rate > 0 {
		rep.OfferedBps = float64(cfg.Rate) * float64(cfg.Sources)
	}
	batch := max(1, min(64<<10, genBudget/cfg.Sources)/int(cfg.MsgSize)) * int(cfg.MsgSize)
	lags := make([]lag, cfg.Sources)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			s := sender{cfg: cfg, i: i, conn: c, weight: weights[i], batch: batch, start: start, deadline: deadline}
			rep.Streams[i] = s.run(ctx, &lags[i])
		})
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	rep.ElapsedS = time.Since(start).Seconds()
	rep.CPUS = (cpuTime() - cpu0).Seconds()
	var lagSum, lagN int64
	for i := range lags {
		rep.LagMaxNs = max(rep.LagMaxNs, lags[i].max)
		lagSum += lags[i].sum
		lagN += lags[i].n
	}
	if lagN > 0 {
		rep.LagMeanNs = lagSum / lagN
	}
	for _, s := range rep.Streams {
		rep.SentBytes += s.Bytes
	}
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("bench: gen: %w", err)
	}
	return ctx.Err()
}

// dialAll opens cfg.Sources connections, at most cfg.MaxDial at a time.
func dialAll(ctx context.Context, cfg GenConfig) ([]net.Conn, error) {
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

// lag tracks how late one source's paced writes were.
type lag struct{ max, sum, n int64 }

// sender drives one connection.
type sender struct {
	cfg      GenConfig
	i        int
	conn     net.Conn
	weight   float64
	batch    int // bytes per write at most: a whole number of messages
	start    time.Time
	deadline time.Time
}

func (s *sender) run(ctx context.Context, lg *lag) (st GenStream) {
	size := int(s.cfg.MsgSize)
	buf := make([]byte, s.batch)
	for j := range buf {
		buf[j] = byte(j%size*7 + s.i)
	}
	st = GenStream{Local: s.conn.LocalAddr().String(), Weight: s.weight}
	var crc uint32
	// A write blocked by a full socket ends at the deadline with what it
	// wrote so far; that prefix is what the sink must see.
	s.conn.SetWriteDeadline(s.deadline)
	write := func(p []byte) bool {
		n, err := s.conn.Write(p)
		crc = crc32.Update(crc, castagnoli, p[:n])
		st.Bytes += uint64(n)
		return err == nil
	}
	stamp := func(m int, at int64) {
		binary.LittleEndian.PutUint64(buf[m*size:], uint64(at))
	}
	// st is the named result, so the digest is filled in on every return.
	defer func() {
		st.CRC32C = fmt.Sprintf("%08x", crc)
		s.conn.Close()
	}()
	if s.cfg.Rate == 0 {
		k := s.batch / size
		for ctx.Err() == nil {
			now := time.Now()
			if !now.Before(s.deadline) {
				break
			}
			for m := range k {
				stamp(m, now.UnixNano())
			}
			st.Messages += uint64(k)
			if !write(buf) {
				break
			}
		}
		return st
	}
	p, err := newPacer(s.cfg.Arrivals, float64(s.cfg.Rate)*s.weight, size, s.cfg.Seed^uint64(s.i)*0x9e3779b97f4a7c15)
	if err != nil {
		return st
	}
	dur := s.cfg.Duration.Nanoseconds()
	base := s.start.UnixNano()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	k := s.batch / size
	for ctx.Err() == nil && p.peek() < dur {
		now := time.Since(s.start).Nanoseconds()
		if next := p.peek(); next > now {
			timer.Reset(time.Duration(next - now))
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			continue
		}
		m := 0
		first := p.peek()
		for m < k && p.peek() <= now && p.peek() < dur {
			stamp(m, base+p.advance())
			m++
		}
		late := now - first
		lg.max = max(lg.max, late)
		lg.sum += late
		lg.n++
		st.Messages += uint64(m)
		if !write(buf[:m*size]) {
			break
		}
	}
	return st
}
