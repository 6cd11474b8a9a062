package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
)

// Option configures the injected pieces of a node.
type Option func(*options)

type options struct {
	stderr      io.Writer
	stdout      io.Writer
	log         *slog.Logger
	path        string
	metricsAddr string
	pprof       bool
	startWait   time.Duration
}

// WithLogOutput sends the node's log to w instead of os.Stderr, in the
// format the node file's log section says.
func WithLogOutput(w io.Writer) Option { return func(o *options) { o.stderr = w } }

// WithStdout sends the stdout output to w instead of os.Stdout.
func WithStdout(w io.Writer) Option { return func(o *options) { o.stdout = w } }

// WithLogger replaces the node's logger (and the log section's format and
// level) altogether.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithConfigPath names the node file: errors name it, and a reload
// (SIGHUP) reads it again.
func WithConfigPath(path string) Option { return func(o *options) { o.path = path } }

// WithMetrics serves /metrics and /healthz on addr, overriding the node
// file's metrics.listen, and /debug/pprof/ too if pprof is set.
func WithMetrics(addr string, pprof bool) Option {
	return func(o *options) { o.metricsAddr, o.pprof = addr, pprof || o.pprof }
}

// ErrForced is returned by Run when a second signal cut the drain short.
var ErrForced = errors.New("node: second signal: exiting without finishing the drain")

// ErrSourcesFailed is wrapped by Run's error when the node drained
// completely but some of its sources had failed on the way.
var ErrSourcesFailed = errors.New("sources failed")

// Report is what Run returns after a drain.
type Report struct {
	Bytes     uint64   // bytes the engine received
	Delivered uint64   // data chunks handed to the output
	Records   uint64   // records among them (counted with log.status only)
	Published uint64   // chunks JetStream acknowledged (with that output)
	Addrs     []string // what the listeners bound, as kind://addr
	Metrics   string   // the metrics endpoint's address, if any
	Failed    []string // the sources that failed, by name, with why
}

// Node is a running ingest node: New opens it, Run serves and drains it.
// Run, Reload, Addrs, MetricsAddr and Health are safe for concurrent use.
type Node struct {
	cfg  Config
	path string
	log  *slog.Logger
	e    *engine.Engine
	out  output
	pub  *jetstream.Publisher

	ctx    context.Context // ends when the drain starts: cancels waits for files
	cancel context.CancelFunc
	wg     sync.WaitGroup // file waits, the status line

	reloadMu sync.Mutex // one Reload at a time
	mu       sync.Mutex
	entries  []*entry
	idMu     sync.RWMutex // guards byID, which engine.WithAdded hooks fill
	byID     map[srcs.ID]*entry
	draining bool

	delivered atomic.Uint64
	records   atomic.Uint64
	countRecs bool

	http *httpServer
}

// New opens a node as cfg says: the output, the engine, every source, the
// metrics endpoint. A source that cannot open fails New with an error
// naming it (a tail with wait_for_file waits for its file instead);
// sources that can reconnect (tcp_client, unix_client, mqtt) retry in the
// background with backoff. cfg must come from Load or Parse. New logs
// "node ready" when everything is open.
func New(cfg Config, opts ...Option) (_ *Node, err error) {
	// Errors may quote a server URL; its credentials never leave.
	defer func() { err = operatorError(err) }()
	o := options{stderr: os.Stderr, stdout: os.Stdout, path: "node.yaml", startWait: 10 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.metricsAddr == "" {
		o.metricsAddr = cfg.Metrics.Listen
	}
	o.pprof = o.pprof || cfg.Metrics.Pprof
	log := o.log
	if log == nil {
		if log, err = newLogger(cfg.Log, o.stderr); err != nil {
			return nil, err
		}
	}
	n := &Node{cfg: cfg, path: o.path, log: log, byID: map[srcs.ID]*entry{}, countRecs: cfg.Log.Status > 0}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.close(context.Background())
		}
	}()
	if n.out, err = n.openOutput(o.stdout); err != nil {
		return nil, err
	}
	n.e, err = engine.New(cfg.Engine, engine.WithHandler(n.handle), engine.WithLogger(log),
		engine.WithErrorHandler(n.sourceError))
	if err != nil {
		return nil, fmt.Errorf("node: %s: engine: %w", o.path, err)
	}
	if err := n.checkPayload(); err != nil {
		return nil, err
	}
	for i, s := range cfg.Sources {
		if err := n.add(i, s); err != nil {
			return nil, err
		}
	}
	if err := n.awaitOpens(o.startWait); err != nil {
		return nil, err
	}
	if o.metricsAddr != "" {
		if n.http, err = n.serveHTTP(o.metricsAddr, o.pprof); err != nil {
			return nil, err
		}
	} else if o.pprof {
		return nil, errors.New("node: metrics.pprof needs an endpoint: set metrics.listen")
	} else if cfg.Metrics.WebConfigFile != "" {
		return nil, errors.New("node: metrics.web_config_file needs an endpoint: set metrics.listen")
	}
	if cfg.Log.Status > 0 {
		n.wg.Go(n.statusLoop)
	}
	attrs := []any{"sources", len(cfg.Sources), "runner", n.e.Runner(), "output", n.out.describe()}
	if a := n.Addrs(); len(a) > 0 {
		attrs = append(attrs, "listening", strings.Join(a, " "))
	}
	if n.http != nil {
		attrs = append(attrs, "metrics", n.http.scheme+"://"+n.http.addr+"/metrics")
	}
	log.Info("node ready", attrs...)
	return n, nil
}

// checkPayload refuses buffers larger than the NATS server takes: they
// could never be published.
func (n *Node) checkPayload() error {
	if n.pub == nil {
		return nil
	}
	buf := n.cfg.Engine.BufSize
	if buf == 0 {
		buf = engine.DefaultBufSize
	}
	if mp := n.pub.MaxPayload(); int64(buf) > mp {
		return &ConfigError{File: n.path, Key: "engine.buf_size",
			Msg: fmt.Sprintf("%d: above the NATS server's max_payload (%d) of output.jetstream", buf, mp)}
	}
	return nil
}

// Addrs returns what the node's listeners bound, as kind://addr, in the
// order of the node file.
func (n *Node) Addrs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, en := range n.entries {
		if en.addr != "" {
			out = append(out, en.addr)
		}
	}
	return out
}

// MetricsAddr returns the address of the metrics endpoint, or "".
func (n *Node) MetricsAddr() string {
	if n.http == nil {
		return ""
	}
	return n.http.addr
}

// Engine returns the node's engine, for inspection.
func (n *Node) Engine() *engine.Engine { return n.e }

// handle is the engine's push handler: it notes sources that end, counts,
// and hands the chunk to the output, which releases it.
func (n *Node) handle(c engine.Chunk) {
	// Only the status line, an end of stream and the outputs that write
	// records need to know the entry; the others skip the lookup on the
	// hot path.
	var en *entry
	if n.out.records() || n.countRecs || c.Flags&srcs.EndOfStream != 0 {
		en = n.entryOf(c)
	}
	if len(c.Data) > 0 {
		n.delivered.Add(1)
		if n.countRecs {
			n.records.Add(uint64(countRecords(en, c)))
		}
	}
	if c.Flags&srcs.EndOfStream != 0 {
		n.sourceEnded(en, c)
	}
	n.out.handle(en, c)
}

// sourceError is the engine's error handler.
func (n *Node) sourceError(err error) {
	var se *srcs.SourceError
	if errors.As(err, &se) {
		n.idMu.RLock()
		en := n.byID[se.ID]
		n.idMu.RUnlock()
		switch {
		case en != nil && en.ln != nil:
			// A connection of a listener: counted by its end of stream
			// (sluice_listener_connections_failed_total); peers reset
			// connections too often for each to be worth a warning.
			n.log.Debug("connection error", "listener", en.name, "name", se.Name, "op", se.Op, "err", se.Err)
		case en != nil && errors.Is(err, engine.ErrReconnected):
			// The outage the earlier errors reported is over.
			en.setErr(nil)
			n.log.Info("source connected again", "source", en.name, "after", describeErr(se.Err))
		case en != nil:
			en.setErr(err)
			n.log.Warn("source error", "source", en.name, "op", se.Op, "err", describeErr(se.Err))
		default:
			n.log.Debug("connection error", "name", se.Name, "op", se.Op, "err", se.Err)
		}
		return
	}
	n.log.Warn("source error", "err", err)
}

// Run serves until ctx ends or sigs delivers SIGINT or SIGTERM, then
// drains: listeners stop accepting, every source stops and delivers what
// it read, the output takes and releases every chunk (JetStream: once
// stored), tails save their checkpoints. SIGHUP reloads the node file
// (Reload). During the drain a second SIGINT or SIGTERM forces Run to
// return ErrForced at once, but only if it comes ForceAfter or more after
// the first, or is SIGINT after SIGTERM, or SIGINT again from a terminal:
// a process manager that signals the whole group, or `timeout`, sends the
// same signal twice at once, and that is one request to stop. A drain
// begun because ctx ended is forced only by a stop signal ForceAfter or
// more after it began: a program may end ctx on the very signal sigs
// then delivers. sigs may be nil. Run returns an error wrapping ErrSourcesFailed if any source
// failed while the node ran.
func (n *Node) Run(ctx context.Context, sigs <-chan os.Signal) (_ *Report, err error) {
	defer func() { err = operatorError(err) }()
	var first os.Signal
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case sig := <-sigs:
			if isHangup(sig) {
				n.Reload()
				continue
			}
			first = sig
			break wait
		}
	}
	policy := newSignalPolicy(first, time.Now(), stdinIsTerminal())
	n.log.Info("draining", "signal", sigName(first), "timeout", n.cfg.DrainTimeout,
		"force", "send the signal again after "+ForceAfter.String()+", or SIGINT")
	dctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainTimeout)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- n.close(dctx) }()
	for {
		select {
		case err := <-drained:
			rep := n.report()
			if err != nil {
				return rep, fmt.Errorf("node: drain: %w", err)
			}
			n.log.Info("drained", "bytes", rep.Bytes, "chunks", rep.Delivered, "failed_sources", len(rep.Failed))
			if len(rep.Failed) > 0 {
				return rep, fmt.Errorf("node: %d of %d sources failed (%s): %w", len(rep.Failed), len(n.cfg.Sources),
					strings.Join(rep.Failed, "; "), ErrSourcesFailed)
			}
			return rep, nil
		case sig := <-sigs:
			switch force, why := policy.next(sig, time.Now()); {
			case force:
				cancel()
				n.log.Error("second signal: exiting without finishing the drain", "signal", sigName(sig), "why", why)
				return n.report(), ErrForced
			default:
				n.log.Info("signal ignored: the drain goes on", "signal", sigName(sig), "why", why)
			}
		}
	}
}

func (n *Node) report() *Report {
	rep := &Report{Bytes: n.e.Totals().Bytes, Delivered: n.delivered.Load(), Records: n.records.Load(),
		Addrs: n.Addrs(), Metrics: n.MetricsAddr()}
	if n.pub != nil {
		rep.Published = n.pub.Stats().Acked
	}
	n.mu.Lock()
	for _, en := range n.entries {
		if st, err := en.status(); st == stateFailed {
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s: %s", en.name, describeErr(err)))
		}
	}
	n.mu.Unlock()
	return rep
}

// close drains and closes everything New opened, in order: file waits
// and the status line stop, the engine stops its sources and waits until
// every chunk is released (for JetStream: stored), the output closes,
// tails save their checkpoints, and the metrics endpoint stops last, so a
// final scrape still sees the drain. It is safe on a node New gave up on.
func (n *Node) close(ctx context.Context) error {
	n.mu.Lock()
	n.draining = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	var err error
	if n.e != nil {
		err = n.e.Shutdown(ctx)
	}
	if n.out != nil {
		err = errors.Join(err, n.out.close(ctx))
	}
	n.mu.Lock()
	entries := append([]*entry(nil), n.entries...)
	n.mu.Unlock()
	for _, en := range entries {
		if en.tail != nil {
			if ferr := en.tail.Flush(); ferr != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", en.name, ferr))
			}
		}
	}
	if n.http != nil {
		n.http.close()
	}
	return err
}

// httpServer is the metrics endpoint.
type httpServer struct {
	addr   string
	scheme string // https with tls_server_config in metrics.web_config_file
	srv    *http.Server
	done   chan struct{}
}

func (h *httpServer) close() {
	h.srv.Close()
	<-h.done
}
