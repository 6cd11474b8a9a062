package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Stream is the collector's record of one source.
type Stream struct {
	ID     srcs.ID
	Name   string
	Bytes  uint64
	chunks uint64
	// First and last are when its first and latest bytes were delivered
	// (UnixNano).
	First, Last int64
	CRC         uint32
	ended       bool
	tracker     load.RecordTracker
	Errors      atomic.Uint64
	// Framed streams only: whole records, the bytes of a record the
	// source never finished (a Truncated chunk's tail), and chunks with
	// the Records flag that did not end on a record boundary (an engine
	// bug, which run reports as a mismatch).
	Records   uint64
	Truncated uint64
	Misframed uint64
	// Skipped is the records too long to deliver, which the engine
	// dropped: the source's final count, from its end-of-stream chunk.
	Skipped uint64
	// quiet marks a quiet source (load.QuietHeader), whose lines are
	// timed rather than counted as load: Snapshot leaves it out.
	quiet *load.QuietLines
}

// latStripe is one of the collector's latency histograms. Sources are
// spread over stripes by id, so that processing goroutines rarely contend.
type latStripe struct {
	mu  sync.Mutex
	eng *hdrhistogram.Histogram // delivery minus actual send
	e2e *hdrhistogram.Histogram // delivery minus scheduled send
}

// Collector is the engine's consumer in every measurement: for each source
// it counts bytes, checksums them (CRC-32C), counts records when the
// engine frames them, and, when the stream carries fixed-size timestamped
// messages, records delivery latencies. Handle runs
// on the engine's processing goroutines; a source's chunks arrive in order
// on one of them, so a stream is touched by one goroutine at a time. Read
// the per-stream results only after the engine has shut down.
type Collector struct {
	msgSize int         // 0: the stream carries no timestamps
	crc     bool        // checksum every byte
	framer  srcs.Framer // the listeners' framer; nil: raw bytes

	mu         sync.Mutex
	Streams    []*Stream // by source id
	errSamples []string  // the first maxErrorSamples errors

	stripes []latStripe

	quietMu sync.Mutex
	quiet   load.QuietReport // the quiet sources' lines, under quietMu

	Total    atomic.Uint64
	chunks   atomic.Uint64
	Partials atomic.Uint64
	First    atomic.Int64 // UnixNano of the first byte, 0 before
	Last     atomic.Int64 // UnixNano of the latest byte
	Ended    atomic.Int64
	Errs     atomic.Uint64
	Records  atomic.Uint64
	// The steady interval, while every stream was sending: from the
	// latest first byte of a stream to the first end of stream, with the
	// total bytes at each end (see steady).
	lastStart      atomic.Int64
	lastStartBytes atomic.Uint64
	firstEnd       atomic.Int64
	firstEndBytes  atomic.Uint64

	target  atomic.Int64  // ended count that closes allEnded; 0: none
	allOnce sync.Once     // closes allEnded
	allEnd  chan struct{} // closed when ended reaches target
}

// NewCollector returns a collector for streams of msgSize-byte timestamped
// messages (0: no timestamps), framed by framer (nil: raw bytes).
func NewCollector(msgSize int, crc bool, framer srcs.Framer) *Collector {
	c := &Collector{msgSize: msgSize, crc: crc, framer: framer, allEnd: make(chan struct{})}
	if msgSize > 0 {
		c.stripes = make([]latStripe, 2*runtime.GOMAXPROCS(0))
		for i := range c.stripes {
			c.stripes[i].eng, c.stripes[i].e2e = report.NewHist(), report.NewHist()
		}
	}
	return c
}

// WithStreams calls f with the per-source records, by source id, under
// the collector's lock: f must not keep the slice.
func (c *Collector) WithStreams(f func(streams []*Stream)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c.Streams)
}

// stream returns the record of source id, creating it on first sight.
func (c *Collector) stream(id srcs.ID, name string) *Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	for int(id) >= len(c.Streams) {
		c.Streams = append(c.Streams, nil)
	}
	s := c.Streams[id]
	if s == nil {
		s = &Stream{ID: id, Name: name, tracker: load.RecordTracker{Size: c.msgSize}}
		c.Streams[id] = s
	}
	return s
}

// Handle is the engine's push handler.
func (c *Collector) Handle(ch engine.Chunk) {
	s := c.stream(ch.Source, ch.Name)
	if s.Bytes == 0 && s.quiet == nil && len(ch.Data) > 0 && load.IsQuiet(ch.Data) {
		s.quiet = &load.QuietLines{}
		c.quietMu.Lock()
		c.quiet.Connections++
		c.quietMu.Unlock()
	}
	if s.quiet != nil {
		c.handleQuiet(s, ch)
		return
	}
	if n := len(ch.Data); n > 0 {
		now := time.Now().UnixNano()
		if s.Bytes == 0 {
			s.First = now
			c.lastStart.Store(now)
			c.lastStartBytes.Store(c.Total.Load())
		}
		s.Last = now
		s.Bytes += uint64(n)
		s.chunks++
		if c.framer != nil && ch.Flags&srcs.Records != 0 {
			c.count(s, ch.Data, ch.Flags&srcs.Truncated != 0) // and the checksum
		} else if c.crc {
			s.CRC = crc32.Update(s.CRC, castagnoli, ch.Data)
		}
		if c.msgSize > 0 {
			st := &c.stripes[int(ch.Source)%len(c.stripes)]
			st.mu.Lock()
			s.tracker.Feed(ch.Data, now, st.eng, st.e2e)
			st.mu.Unlock()
		}
		c.First.CompareAndSwap(0, now)
		c.Last.Store(now)
		c.Total.Add(uint64(n))
		c.chunks.Add(1)
	}
	if ch.Flags&srcs.Partial != 0 {
		c.Partials.Add(1)
	}
	if ch.Flags&srcs.EndOfStream != 0 && !s.ended {
		s.ended = true
		if now := time.Now().UnixNano(); c.firstEnd.CompareAndSwap(0, now) {
			c.firstEndBytes.Store(c.Total.Load())
		}
		if ch.Final != nil {
			s.Skipped = ch.Final.RecordsSkipped
		}
		if n := c.Ended.Add(1); n == c.target.Load() {
			c.allOnce.Do(func() { close(c.allEnd) })
		}
	}
	ch.Release()
}

// handleQuiet times the lines of a quiet source's chunk, the handler's
// job for such a source; its bytes are not the load's, so they stay out
// of the totals and of the streams that are checked against the load.
func (c *Collector) handleQuiet(s *Stream, ch engine.Chunk) {
	if len(ch.Data) > 0 {
		now := time.Now().UnixNano()
		s.Bytes += uint64(len(ch.Data))
		c.quietMu.Lock()
		s.quiet.Feed(ch.Data, now, &c.quiet)
		c.quietMu.Unlock()
	}
	if ch.Flags&srcs.EndOfStream != 0 {
		s.ended = true
	}
	ch.Release()
}

// Quiet returns what the quiet sources brought, nil when none connected.
func (c *Collector) Quiet() *load.QuietReport {
	c.quietMu.Lock()
	defer c.quietMu.Unlock()
	if c.quiet.Connections == 0 {
		return nil
	}
	q := c.quiet
	q.LatencyNs = append([]int64(nil), q.LatencyNs...)
	return &q
}

// count checksums p, a chunk with the Records flag, and counts its
// records: it holds whole records, and when truncated ends with the start
// of one.
//
// Both are charged to the engine process's CPU, so a delimiter is counted
// the cheap way: newline records are the chunk's '\n' bytes (the engine
// delivers no line above the framer's maximum, and a truncated tail has
// none), counted with a vectorised scan of each block of LineBlock bytes
// right after the checksum read it, while it is still in the L1 cache. A
// framer with a header reads one header per record (srcs.CountRecords).
func (c *Collector) count(s *Stream, p []byte, truncated bool) {
	var recs, n int
	if _, ok := c.framer.(srcs.Newline); ok {
		for off := 0; off < len(p); off += LineBlock {
			b := p[off:min(off+LineBlock, len(p))]
			if c.crc {
				s.CRC = crc32.Update(s.CRC, castagnoli, b)
			}
			recs += bytes.Count(b, newline)
		}
		n = bytes.LastIndexByte(p, '\n') + 1
	} else {
		if c.crc {
			s.CRC = crc32.Update(s.CRC, castagnoli, p)
		}
		recs, n, _ = srcs.CountRecords(c.framer, p)
	}
	s.Records += uint64(recs)
	c.Records.Add(uint64(recs))
	if tail := len(p) - n; tail > 0 {
		if truncated {
			s.Truncated += uint64(tail)
		} else {
			s.Misframed++
		}
	}
}

// LineBlock is the block size of count's newline pass: well within an L1
// data cache, large enough that the checksum's per-call cost stays small.
const LineBlock = 8 << 10

var newline = []byte{'\n'}

// OnError is the engine's error handler: it counts errors, in all and per
// source.
func (c *Collector) OnError(err error) {
	if c.Errs.Add(1) <= MaxErrorSamples {
		c.mu.Lock()
		c.errSamples = append(c.errSamples, err.Error())
		c.mu.Unlock()
	}
	if se := (*srcs.SourceError)(nil); errors.As(err, &se) {
		c.stream(se.ID, se.Name).Errors.Add(1)
	}
}

// MaxErrorSamples is how many errors a collector keeps the text of.
const MaxErrorSamples = 5

// ErrorSamples returns the text of the first errors.
func (c *Collector) ErrorSamples() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errSamples...)
}

// Steady returns the bytes per second received while every stream was
// sending, from the moment the last one to start sent its first byte to
// the first end of stream, and how long that lasted; zeros when no stream
// ended after the last one started. Clients that start their connections
// one by one (fio starts a thread per job) stretch the time from the
// first byte to the last, which dilutes a plain average.
func (c *Collector) Steady() (bps, seconds float64) {
	a, b := c.lastStart.Load(), c.firstEnd.Load()
	if a == 0 || b <= a {
		return 0, 0
	}
	seconds = time.Duration(b - a).Seconds()
	return float64(c.firstEndBytes.Load()-c.lastStartBytes.Load()) / seconds, seconds
}

// Expect arms allEnded to close once n sources have ended.
func (c *Collector) Expect(n int) <-chan struct{} {
	c.target.Store(int64(n))
	if c.Ended.Load() >= int64(n) {
		c.allOnce.Do(func() { close(c.allEnd) })
	}
	return c.allEnd
}

// latency merges the stripes: engine latencies (delivery minus actual
// send) and end-to-end ones (delivery minus schedule).
func (c *Collector) latency() (eng, e2e *hdrhistogram.Histogram) {
	eng, e2e = report.NewHist(), report.NewHist()
	for i := range c.stripes {
		st := &c.stripes[i]
		st.mu.Lock()
		eng.Merge(st.eng)
		e2e.Merge(st.e2e)
		st.mu.Unlock()
	}
	return eng, e2e
}

// Snapshot returns the streams seen, in id order, but the quiet sources'
// (see Quiet). Call it after the engine has shut down.
func (c *Collector) Snapshot() []*Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Stream, 0, len(c.Streams))
	for _, s := range c.Streams {
		if s != nil && s.quiet == nil {
			out = append(out, s)
		}
	}
	return out
}

// PeerOf turns a source name ("tcp://127.0.0.1:4000") into the peer
// address ("127.0.0.1:4000").
func PeerOf(name string) string {
	if _, rest, ok := strings.Cut(name, "://"); ok {
		return rest
	}
	return name
}

// SinkEngine is an engine that feeds a collector from TCP listeners.
type SinkEngine struct {
	Engine *engine.Engine
	col    *Collector
	lns    []*srcs.Listener
}

// StartSink creates an engine with the given runner and starts listening on
// addrs, framing every connection with the collector's framer. The engine
// refuses a runner that cannot work here with an *engine.RunnerError.
func StartSink(f harness.EngineFlags, runner string, addrs []string, col *Collector, opts ...engine.Option) (*SinkEngine, error) {
	opts = append([]engine.Option{f.Handler(col.Handle), engine.WithErrorHandler(col.OnError)}, opts...)
	e, err := engine.New(f.Config(runner), opts...)
	if err != nil {
		return nil, err
	}
	if runner != engine.RunnerAuto && e.Runner() != runner {
		ShutdownEngine(e)
		return nil, fmt.Errorf("bench: asked for runner %s but the engine chose %s (is %s set?)", runner, e.Runner(), engine.EnvRunner)
	}
	s := &SinkEngine{Engine: e, col: col}
	for _, a := range addrs {
		ln, err := srcs.ListenTCP(a, srcs.ListenerConfig{MaxConns: f.MaxConns, RecvBuffer: int(f.RecvBuffer), Framer: col.framer, TLS: f.TLS})
		if err == nil {
			err = e.AddListener(ln)
		}
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			s.Close()
			return nil, fmt.Errorf("bench: listen %s: %w", a, err)
		}
		s.lns = append(s.lns, ln)
	}
	return s, nil
}

// Addrs returns the bound listen addresses.
func (s *SinkEngine) Addrs() []string {
	out := make([]string, len(s.lns))
	for i, l := range s.lns {
		out[i] = l.Addr().String()
	}
	return out
}

// Live is the number of sources the engine is still driving.
func (s *SinkEngine) Live() int { return s.Engine.CountSources().Live() }

// Close shuts the engine down, which also closes the listeners.
func (s *SinkEngine) Close() error {
	return ShutdownEngine(s.Engine)
}

// ShutdownTimeout bounds an engine's shutdown in every command.
const ShutdownTimeout = 30 * time.Second

func ShutdownEngine(e *engine.Engine) error {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		return fmt.Errorf("bench: engine shutdown: %w", err)
	}
	return nil
}
