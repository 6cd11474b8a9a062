package idle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// The children of `idle` are the hidden `idle sink` and `idle conns`
// commands. Each reads its spec as the first JSON line of its input,
// answers with a "ready" line, then answers one JSON line per request
// line, in order, and exits at the end of its input or after "stop".

// Roles of the hidden children.
const (
	IdleSinkChild  = "sink"
	IdleConnsChild = "conns"
)

// IsIdleChild says whether arg, the first argument after `idle`, names
// one of its hidden children.
func IsIdleChild(arg string) bool { return arg == IdleSinkChild || arg == IdleConnsChild }

// Requests.
const (
	opArm     = "arm"     // sink: note when the idle count reaches Target
	opCounts  = "counts"  // sink: its counters
	opSample  = "sample"  // sink: its memory, and a heap profile
	opStreams = "streams" // sink: the active streams ended since the last call
	opStop    = "stop"    // sink: shut down and report
	opOpen    = "open"    // client: open connections up to Target
	opClose   = "close"   // client: reset every connection
)

type idleReq struct {
	Op          string `json:"op"`
	Target      int64  `json:"target,omitempty"`
	HeapProfile string `json:"heap_profile,omitempty"`
	FDs         bool   `json:"fds,omitempty"` // counts: the sink's descriptors too
}

// idleResp is every answer; the field of the request's kind is set.
type idleResp struct {
	Error   string        `json:"error,omitempty"`
	Counts  *idleCounts   `json:"counts,omitempty"`
	Sample  *idleSample   `json:"sample,omitempty"`
	Streams []idleStream  `json:"streams,omitempty"`
	Stop    *idleStopInfo `json:"stop,omitempty"`
	Opened  *idleOpened   `json:"opened,omitempty"`
}

// idleCounts are the sink's counters.
type idleCounts struct {
	IdleAdded   int64 `json:"idle_added"`
	IdleEnded   int64 `json:"idle_ended"`
	ActiveAdded int64 `json:"active_added"`
	ActiveEnded int64 `json:"active_ended"`
	// FirstNs and ReachedNs are when the first idle source after arm
	// and the armed target's were registered (UnixNano), 0 before.
	FirstNs      int64    `json:"first_ns"`
	ReachedNs    int64    `json:"reached_ns"`
	Bytes        uint64   `json:"bytes"`
	CPUNs        int64    `json:"cpu_ns"`
	Goroutines   int      `json:"goroutines"`
	Errors       uint64   `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	FDs          int      `json:"fds,omitempty"` // when asked: the descriptors the sink holds
}

type idleSample struct {
	Raw         IdleMem `json:"raw"`
	Scavenged   IdleMem `json:"scavenged"`
	HeapProfile string  `json:"heap_profile,omitempty"`
}

// idleStream is one active stream as the sink received it.
type idleStream struct {
	Peer  string `json:"peer"`
	Bytes uint64 `json:"bytes"`
	CRC   uint32 `json:"crc"`
}

type idleStopInfo struct {
	ThreadsMax  int    `json:"threads_max"`
	RSSMaxBytes int64  `json:"rss_max_bytes"`
	Errors      uint64 `json:"errors"`
}

// idleOpened is the client's answer to open.
type idleOpened struct {
	Open    int64 `json:"open"`
	StartNs int64 `json:"start_ns"` // the first connect of this request
	EndNs   int64 `json:"end_ns"`   // the last connection established
}

// idleSinkSpec configures the sink child.
type idleSinkSpec struct {
	Runner     string              `json:"runner"`
	Engine     harness.EngineFlags `json:"engine"`
	IdleAddrs  []string            `json:"idle_addrs"`
	ActiveAddr string              `json:"active_addr"`
	// NoFile is the descriptors the sink needs; with NoFileHard it
	// raises its soft limit to the hard limit all the same (uring, whose
	// file tables follow the soft limit).
	NoFile         uint64 `json:"nofile"`
	NoFileHard     bool   `json:"nofile_hard,omitempty"`
	MemProfileRate int    `json:"mem_profile_rate"`
}

// idleReady is a child's first answer.
type idleReady struct {
	Error      string      `json:"error,omitempty"`
	Runner     string      `json:"runner,omitempty"`
	Workers    int         `json:"workers,omitempty"`
	IdleAddrs  []string    `json:"idle_addrs,omitempty"`
	ActiveAddr string      `json:"active_addr,omitempty"`
	NoFile     NoFileLimit `json:"nofile"`
	// FileSlots is each uring worker's file table as the engine sizes
	// it under the sink's soft limit; 0 for the other runners.
	FileSlots int `json:"file_slots,omitempty"`
}

// idleClientSpec configures a client child: client Index of Procs, which
// holds the plan's connections Index, Index+Procs, Index+2*Procs...
// (idleShare), each on the (source, listener) pair idlePair gives it.
type idleClientSpec struct {
	Dst    []string `json:"dst"` // the sink's idle listeners
	Src    []string `json:"src"` // source addresses
	NoFile uint64   `json:"nofile"`
	Index  int      `json:"index"`
	Procs  int      `json:"procs"` // 0: 1
}

// idleProc is the parent's end of a child: requests are answered in
// order, one at a time.
type idleProc struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	mu     sync.Mutex
	cancel context.CancelFunc
	waited bool
}

// startIdleChild starts `exe idle role`, sends spec and reads its ready
// line into ready.
func startIdleChild(ctx context.Context, exe, role string, spec any, cpus []int, ready *idleReady, ios harness.IO) (*idleProc, error) {
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, exe, "idle", role)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = bench.ShutdownTimeout
	cmd.Stderr = ios.Err
	p := &idleProc{name: "idle " + role, cmd: cmd, cancel: cancel}
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		cancel()
		return nil, fmt.Errorf("bench: %s: %w", p.name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bench: %s: %w", p.name, err)
	}
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(nil, 64<<20)
	if err := harness.StartOnCPUs(cmd, cpus); err != nil {
		cancel()
		return nil, fmt.Errorf("bench: start %s: %w", p.name, err)
	}
	if err := json.NewEncoder(p.in).Encode(spec); err != nil {
		p.kill()
		return nil, fmt.Errorf("bench: %s: %w", p.name, err)
	}
	if err := p.read(ready); err != nil {
		p.kill()
		return nil, err
	}
	if ready.Error != "" {
		p.kill()
		return nil, fmt.Errorf("bench: %s: %s", p.name, ready.Error)
	}
	return p, nil
}

// read decodes the child's next line into v.
func (p *idleProc) read(v any) error {
	if !p.out.Scan() {
		err := p.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("bench: %s exited: %w", p.name, err)
	}
	if err := json.Unmarshal(p.out.Bytes(), v); err != nil {
		return fmt.Errorf("bench: %s: bad answer %q: %w", p.name, p.out.Bytes(), err)
	}
	return nil
}

// call sends one request and returns its answer.
func (p *idleProc) call(req idleReq) (*idleResp, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := json.NewEncoder(p.in).Encode(req); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", p.name, err)
	}
	var r idleResp
	if err := p.read(&r); err != nil {
		return nil, err
	}
	if r.Error != "" {
		return nil, fmt.Errorf("bench: %s: %s: %s", p.name, req.Op, r.Error)
	}
	return &r, nil
}

// kill ends the child, asking first (its input closes), and waits. It
// may be called more than once.
func (p *idleProc) kill() {
	if p.waited {
		return
	}
	p.waited = true
	p.in.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.cmd.Wait()
	}()
	select {
	case <-done:
	case <-time.After(bench.ShutdownTimeout):
		p.cancel()
		<-done
	}
	p.cancel()
}

// idleSink is the parent's handle on the sink child.
type idleSink struct {
	*idleProc
	ready idleReady
}

func startIdleSink(ctx context.Context, exe string, spec idleSinkSpec, ios harness.IO) (*idleSink, error) {
	s := &idleSink{}
	p, err := startIdleChild(ctx, exe, IdleSinkChild, spec, nil, &s.ready, ios)
	if err != nil {
		return nil, err
	}
	s.idleProc = p
	return s, nil
}

func (s *idleSink) counts() (*idleCounts, error) {
	r, err := s.call(idleReq{Op: opCounts})
	if err != nil {
		return nil, err
	}
	if r.Counts == nil {
		return nil, errors.New("bench: idle sink: no counts")
	}
	return r.Counts, nil
}

// stop shuts the sink down and waits for it to exit.
func (s *idleSink) stop() (*idleStopInfo, error) {
	r, err := s.call(idleReq{Op: opStop})
	if err != nil {
		return nil, err
	}
	s.kill()
	if r.Stop == nil {
		return nil, errors.New("bench: idle sink: no stop report")
	}
	return r.Stop, nil
}

// idleClient is the parent's handle on one client child.
type idleClient struct {
	*idleProc
	ready idleReady
	index int
}

// idleClients are the parent's handles on a runner's client children:
// client i of n holds the plan's connections i, i+n, i+2n... (idleShare).
type idleClients struct {
	procs []*idleClient
}

// startIdleClients starts n clients on cpus, each with spec's addresses
// and the descriptors for its share of top connections.
func startIdleClients(ctx context.Context, exe string, spec idleClientSpec, n, top int, cpus []int, ios harness.IO) (*idleClients, error) {
	cs := &idleClients{}
	for i := range n {
		sp := spec
		sp.Index, sp.Procs, sp.NoFile = i, n, uint64(idleShare(top, i, n)+idleFDMargin)
		c := &idleClient{index: i}
		p, err := startIdleChild(ctx, exe, IdleConnsChild, sp, cpus, &c.ready, ios)
		if err != nil {
			cs.kill()
			if n > 1 {
				err = fmt.Errorf("client %d of %d: %w", i+1, n, err)
			}
			return nil, err
		}
		if n > 1 {
			p.name = fmt.Sprintf("idle client %d of %d", i+1, n)
		}
		c.idleProc = p
		cs.procs = append(cs.procs, c)
	}
	return cs, nil
}

// noFile is each client's RLIMIT_NOFILE.
func (cs *idleClients) noFile() []NoFileLimit {
	out := make([]NoFileLimit, len(cs.procs))
	for i, c := range cs.procs {
		out[i] = c.ready.NoFile
	}
	return out
}

// each runs f on every client at once and returns the first error.
func (cs *idleClients) each(f func(c *idleClient) error) error {
	errs := make([]error, len(cs.procs))
	var wg sync.WaitGroup
	for i, c := range cs.procs {
		wg.Go(func() { errs[i] = f(c) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// open has every client open its share of n connections, at once, and
// sums their answers: the connections open, from the first connect of
// any to the last established.
func (cs *idleClients) open(n int) (*idleOpened, error) {
	got := make([]*idleOpened, len(cs.procs))
	err := cs.each(func(c *idleClient) error {
		r, err := c.call(idleReq{Op: opOpen, Target: int64(idleShare(n, c.index, len(cs.procs)))})
		if err == nil && r.Opened == nil {
			err = fmt.Errorf("bench: %s: no open report", c.name)
		}
		if err == nil {
			got[c.index] = r.Opened
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sum := &idleOpened{}
	for _, o := range got {
		sum.Open += o.Open
		if sum.StartNs == 0 || o.StartNs < sum.StartNs {
			sum.StartNs = o.StartNs
		}
		sum.EndNs = max(sum.EndNs, o.EndNs)
	}
	return sum, nil
}

// reset has every client reset all its connections.
func (cs *idleClients) reset() error {
	return cs.each(func(c *idleClient) error {
		_, err := c.call(idleReq{Op: opClose})
		return err
	})
}

// kill ends every client.
func (cs *idleClients) kill() {
	cs.each(func(c *idleClient) error {
		c.kill()
		return nil
	})
}

// RunIdleChild runs one of the hidden children of `idle` (IsIdleChild),
// on in and out; diagnostics go to errOut.
func RunIdleChild(ctx context.Context, role string, in io.Reader, out, errOut io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	enc := json.NewEncoder(out)
	if !sc.Scan() {
		return fmt.Errorf("bench: idle %s: no spec", role)
	}
	var h idleHandler
	var ready idleReady
	var err error
	switch role {
	case IdleSinkChild:
		var spec idleSinkSpec
		if err = json.Unmarshal(sc.Bytes(), &spec); err == nil {
			h, ready, err = newIdleSinkChild(spec)
		}
	case IdleConnsChild:
		var spec idleClientSpec
		if err = json.Unmarshal(sc.Bytes(), &spec); err == nil {
			h, ready, err = newIdleConns(spec)
		}
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		// The parent reports it.
		ready.Error = err.Error()
		return enc.Encode(ready)
	}
	defer h.close()
	if err := enc.Encode(ready); err != nil {
		return err
	}
	for sc.Scan() {
		var req idleReq
		var r *idleResp
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			r = &idleResp{Error: fmt.Sprintf("bad request %q", sc.Bytes())}
		} else if r, err = h.handle(ctx, req); err != nil {
			r = &idleResp{Error: err.Error()}
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
		if req.Op == opStop {
			return nil
		}
	}
	return sc.Err()
}

// idleHandler is one child's side of the protocol.
type idleHandler interface {
	handle(ctx context.Context, req idleReq) (*idleResp, error)
	close()
}

// idleSinkChild is the engine under measurement, with a listener per
// idle address and one for the active load. It keeps no record per idle
// connection beyond what the engine and the collector keep (the
// collector's only for those that send or end).
type idleSinkChild struct {
	e       *engine.Engine
	col     *bench.Collector
	smp     *harness.Sampler
	closed  bool // the engine is shut down
	sampled bool // smp is finished

	idleAdded atomic.Int64
	idleEnded atomic.Int64
	// After arm: the idle count then (armed), and when the first idle
	// source after it and the target one were registered (UnixNano).
	armed   atomic.Int64
	target  atomic.Int64
	first   atomic.Int64
	reached atomic.Int64

	mu          sync.Mutex
	active      map[srcs.ID]bool // the active listener's sources
	activeAdded int64
	ended       []srcs.ID // active sources ended and not yet reported
	activeEnded int64
}

func newIdleSinkChild(spec idleSinkSpec) (*idleSinkChild, idleReady, error) {
	if spec.MemProfileRate > 0 {
		runtime.MemProfileRate = spec.MemProfileRate
	}
	var ready idleReady
	want := spec.NoFile
	if spec.NoFileHard {
		hard, err := noFileHard()
		if err != nil {
			return nil, ready, err
		}
		want = max(want, hard)
	}
	lim, err := raiseNoFile(want)
	lim.Need = spec.NoFile
	ready.NoFile = lim
	if err != nil {
		return nil, ready, err
	}
	if spec.Runner == engine.RunnerURing {
		ready.FileSlots = idleTableSlots(spec.Engine.FileSlots, lim.Soft)
	}
	s := &idleSinkChild{col: bench.NewCollector(0, true, nil), active: map[srcs.ID]bool{}}
	cfg := spec.Engine.Config(spec.Runner)
	resolved, err := cfg.Resolved()
	if err != nil {
		return nil, ready, err
	}
	s.e, err = engine.New(cfg, engine.WithHandler(s.handleChunk), engine.WithErrorHandler(s.col.OnError))
	if err != nil {
		return nil, ready, err
	}
	if s.e.Runner() != spec.Runner {
		s.close()
		return nil, ready, fmt.Errorf("asked for runner %s but the engine chose %s (is %s set?)", spec.Runner, s.e.Runner(), engine.EnvRunner)
	}
	lc := srcs.ListenerConfig{RecvBuffer: int(spec.Engine.RecvBuffer)}
	listen := func(addr string, added func(srcs.ID, srcs.Source)) (string, error) {
		ln, err := srcs.ListenTCP(addr, lc)
		if err == nil {
			err = s.e.AddListener(ln, engine.WithAdded(added))
		}
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			return "", fmt.Errorf("listen %s: %w", addr, err)
		}
		return ln.Addr().String(), nil
	}
	for _, a := range spec.IdleAddrs {
		bound, err := listen(a, s.addedIdle)
		if err != nil {
			s.close()
			return nil, ready, err
		}
		ready.IdleAddrs = append(ready.IdleAddrs, bound)
	}
	if ready.ActiveAddr, err = listen(spec.ActiveAddr, s.addedActive); err != nil {
		s.close()
		return nil, ready, err
	}
	ready.Runner, ready.Workers = s.e.Runner(), resolved.Workers
	s.smp = harness.StartSampler()
	return s, ready, nil
}

func (s *idleSinkChild) addedIdle(srcs.ID, srcs.Source) {
	n := s.idleAdded.Add(1)
	if n == s.armed.Load()+1 {
		s.first.Store(time.Now().UnixNano())
	}
	if n == s.target.Load() {
		s.reached.Store(time.Now().UnixNano())
	}
}

func (s *idleSinkChild) addedActive(id srcs.ID, _ srcs.Source) {
	s.mu.Lock()
	s.active[id] = true
	s.activeAdded++
	s.mu.Unlock()
}

// handleChunk is the engine's handler: the collector's, plus the count
// of ended sources by listener.
func (s *idleSinkChild) handleChunk(ch engine.Chunk) {
	id, eos := ch.Source, ch.Flags&srcs.EndOfStream != 0
	s.col.Handle(ch)
	if !eos {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[id] {
		delete(s.active, id)
		s.ended = append(s.ended, id)
		s.activeEnded++
		return
	}
	s.idleEnded.Add(1)
}

func (s *idleSinkChild) handle(_ context.Context, req idleReq) (*idleResp, error) {
	switch req.Op {
	case opArm:
		// Called while no idle connection is being opened.
		n := s.idleAdded.Load()
		if n >= req.Target {
			return nil, fmt.Errorf("arm: already %d idle sources", n)
		}
		s.first.Store(0)
		s.reached.Store(0)
		s.armed.Store(n)
		s.target.Store(req.Target)
		return &idleResp{}, nil
	case opCounts:
		s.mu.Lock()
		cn := &idleCounts{ActiveAdded: s.activeAdded, ActiveEnded: s.activeEnded}
		s.mu.Unlock()
		cn.IdleAdded, cn.IdleEnded = s.idleAdded.Load(), s.idleEnded.Load()
		cn.FirstNs, cn.ReachedNs = s.first.Load(), s.reached.Load()
		cn.Bytes, cn.CPUNs, cn.Goroutines = s.col.Total.Load(), harness.CPUTime().Nanoseconds(), runtime.NumGoroutine()
		cn.Errors, cn.ErrorSamples = s.col.Errs.Load(), s.col.ErrorSamples()
		if req.FDs {
			cn.FDs = countFDs()
		}
		return &idleResp{Counts: cn}, nil
	case opSample:
		return s.sample(req.HeapProfile)
	case opStreams:
		s.mu.Lock()
		ids := s.ended
		s.ended = nil
		s.mu.Unlock()
		// The handler appended each id after the collector's last touch
		// of its stream, under mu: the records are final.
		out := make([]idleStream, 0, len(ids))
		s.col.WithStreams(func(streams []*bench.Stream) {
			for _, id := range ids {
				if int(id) < len(streams) && streams[id] != nil {
					st := streams[id]
					out = append(out, idleStream{Peer: bench.PeerOf(st.Name), Bytes: st.Bytes, CRC: st.CRC})
				}
			}
		})
		return &idleResp{Streams: out}, nil
	case opStop:
		err := s.stop()
		threads, rss := s.finishSampler()
		return &idleResp{Stop: &idleStopInfo{ThreadsMax: threads, RSSMaxBytes: rss, Errors: s.col.Errs.Load()}}, err
	}
	return nil, fmt.Errorf("unknown request %q", req.Op)
}

// sample reads the sink's memory as found, then after a collection and
// debug.FreeOSMemory, and writes a heap profile if asked.
func (s *idleSinkChild) sample(heap string) (*idleResp, error) {
	smp := &idleSample{Raw: s.mem()}
	debug.FreeOSMemory() // collects first
	smp.Scavenged = s.mem()
	if heap != "" {
		if err := os.MkdirAll(filepath.Dir(heap), 0o755); err != nil {
			return nil, fmt.Errorf("--heap-profile: %w", err)
		}
		f, err := os.Create(heap)
		if err != nil {
			return nil, fmt.Errorf("--heap-profile: %w", err)
		}
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("--heap-profile: %w", err)
		}
		smp.HeapProfile = heap
	}
	s.smp.Sample()
	return &idleResp{Sample: smp}, nil
}

func (s *idleSinkChild) mem() IdleMem {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	threads, rss := harness.ProcUsage()
	return IdleMem{RSS: rss, RSSAnon: rssAnon(), HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, HeapObjs: ms.HeapObjects,
		StackInuse: ms.StackInuse, RuntimeMeta: ms.MSpanInuse + ms.MCacheInuse + ms.GCSys + ms.OtherSys + ms.BuckHashSys,
		GoSys: ms.Sys, Goroutines: runtime.NumGoroutine(), Threads: threads, FDs: countFDs(), Sources: s.idleAdded.Load() - s.idleEnded.Load()}
}

func (s *idleSinkChild) stop() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return bench.ShutdownEngine(s.e)
}

// finishSampler stops the thread and RSS sampler, once, and returns its
// maxima.
func (s *idleSinkChild) finishSampler() (threads int, rss int64) {
	if s.smp == nil || s.sampled {
		return 0, 0
	}
	s.sampled = true
	return s.smp.Finish()
}

func (s *idleSinkChild) close() {
	s.stop()
	s.finishSampler()
}
