package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/engine/metrics"
	"github.com/sluice-io/sluice/srcs"
)

// NodeFlags are the `sink` flags that turn it into a long-running ingest
// node driven by a YAML file.
type NodeFlags struct {
	Config  string // the node's YAML file; empty: the plain benchmark sink
	Metrics string // serve /metrics on this address
	Pprof   bool   // also serve /debug/pprof/ on the metrics address
}

func (f *NodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Config, "config", f.Config, "run as an ingest node configured by the YAML `FILE` (see examples/node.yaml); other flags but --metrics and --pprof are ignored")
	fs.StringVar(&f.Metrics, "metrics", f.Metrics, "with --config: serve Prometheus metrics at http://`ADDR`/metrics")
	fs.BoolVar(&f.Pprof, "pprof", f.Pprof, "with --metrics: also serve /debug/pprof/ there")
}

func (f NodeFlags) validate() error {
	switch {
	case f.Metrics != "" && f.Config == "":
		return errors.New("--metrics: needs --config")
	case f.Pprof && f.Metrics == "":
		return errors.New("--pprof: needs --metrics")
	}
	return nil
}

// NodeConfig is an ingest node's YAML file: engine settings, sources, an
// output and the metrics' shape. Unknown keys are errors.
type NodeConfig struct {
	Engine  engine.Config `yaml:"engine"`
	Sources []NodeSource  `yaml:"sources"`
	Output  NodeOutput    `yaml:"output"`
	Metrics NodeMetrics   `yaml:"metrics"`
	// DrainTimeout bounds the drain after SIGINT or SIGTERM. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// NodeSource is one entry of the sources list: exactly one kind, plus
// options every kind takes.
type NodeSource struct {
	TCP        *NodeListener          `yaml:"tcp"`
	Unix       *NodeListener          `yaml:"unix"`
	UDP        *srcs.UDPConfig        `yaml:"udp"`
	TCPClient  *srcs.TCPClientConfig  `yaml:"tcp_client"`
	UnixClient *srcs.UnixClientConfig `yaml:"unix_client"`
	File       *srcs.FileConfig       `yaml:"file"`
	Tail       *srcs.TailConfig       `yaml:"tail"`
	MQTT       *srcs.MQTTConfig       `yaml:"mqtt"`
	// Flush overrides the engine's flush timeout for this source (for a
	// listener: for none of its connections, which take the engine's).
	Flush time.Duration `yaml:"flush"`
	// Framing delivers the source (for a listener: each connection) in
	// whole records; srcs.ParseFraming's spelling: none, newline[:MAX],
	// length:N{be,le}[:MAX], octet[:MAX] or mqtt[:MAX]. Not for udp, whose
	// datagrams keep their own boundaries, nor mqtt, which frames its own
	// packets.
	Framing string `yaml:"framing"`
}

// NodeListener is a tcp or unix listener entry: where to listen, and the
// listener's options (max_conns, reuse_port, recv_buffer).
type NodeListener struct {
	Listen              string `yaml:"listen"`
	srcs.ListenerConfig `yaml:",inline"`
}

// NodeOutput says where chunks go. Without any output the node counts
// and releases them (a sink).
type NodeOutput struct {
	JetStream *jetstream.Config `yaml:"jetstream"`
}

// NodeMetrics shapes the /metrics endpoint.
type NodeMetrics struct {
	// PerSource exports per-source series for at most this many sources.
	// Default 0: none.
	PerSource int `yaml:"per_source"`
}

// kind names the one kind an entry sets, or reports how many it sets.
func (s NodeSource) kind() (string, int) {
	var names []string
	for name, set := range map[string]bool{
		"tcp": s.TCP != nil, "unix": s.Unix != nil, "udp": s.UDP != nil, "tcp_client": s.TCPClient != nil,
		"unix_client": s.UnixClient != nil, "file": s.File != nil, "tail": s.Tail != nil, "mqtt": s.MQTT != nil,
	} {
		if set {
			names = append(names, name)
		}
	}
	if len(names) != 1 {
		slices.Sort(names)
		return strings.Join(names, ", "), len(names)
	}
	return names[0], 1
}

// nodeFile is a parsed node file: the config, and the YAML tree for
// naming lines in errors found after decoding.
type nodeFile struct {
	path string
	cfg  NodeConfig
	root *yaml.Node
}

// errorf reports a problem at the key path, with its line.
func (f *nodeFile) errorf(path []any, format string, args ...any) error {
	where := f.path
	if line := lineOf(f.root, path); line > 0 {
		where += ":" + strconv.Itoa(line)
	}
	return fmt.Errorf("bench: %s: %s: %s", where, keyPath(path), fmt.Sprintf(format, args...))
}

// keyPath spells a key path as sources[2].tcp.listen.
func keyPath(path []any) string {
	var b strings.Builder
	for _, k := range path {
		switch k := k.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", k)
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			fmt.Fprint(&b, k)
		}
	}
	return b.String()
}

// lineOf finds the line of the deepest node on path (string keys of
// mappings, int indexes of sequences) that exists.
func lineOf(n *yaml.Node, path []any) int {
	if n == nil {
		return 0
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, k := range path {
		var next *yaml.Node
		switch k := k.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						line, next = n.Content[i].Line, n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k < len(n.Content) {
				next = n.Content[k]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// LoadNodeConfig reads and checks a node file. Errors name the file, the
// line and the key: unknown keys, values of the wrong type, and values
// the engine or a source would refuse.
func LoadNodeConfig(path string) (NodeConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return NodeConfig{}, fmt.Errorf("bench: node config: %w", err)
	}
	f := &nodeFile{path: path, root: &yaml.Node{}}
	if err := yaml.Unmarshal(data, f.root); err != nil {
		return NodeConfig{}, fmt.Errorf("bench: %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f.cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return NodeConfig{}, fmt.Errorf("bench: %s: %s", path, strings.Join(te.Errors, "; "))
		}
		return NodeConfig{}, fmt.Errorf("bench: %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := f.validate(); err != nil {
		return NodeConfig{}, err
	}
	return f.cfg, nil
}

func (f *nodeFile) validate() error {
	c := &f.cfg
	if err := c.Engine.Validate(); err != nil {
		var ce *engine.ConfigError
		if errors.As(err, &ce) {
			key := ce.Field
			if sf, ok := reflect.TypeFor[engine.Config]().FieldByName(ce.Field); ok {
				key = strings.Split(sf.Tag.Get("yaml"), ",")[0]
			}
			return f.errorf([]any{"engine", key}, "%v: %s", ce.Value, ce.Reason)
		}
		return f.errorf([]any{"engine"}, "%v", err)
	}
	if len(c.Sources) == 0 {
		return f.errorf([]any{"sources"}, "the node needs at least one source")
	}
	for i, s := range c.Sources {
		kind, n := s.kind()
		switch {
		case n == 0:
			return f.errorf([]any{"sources", i}, "names no kind (tcp, unix, udp, tcp_client, unix_client, file, tail or mqtt)")
		case n > 1:
			return f.errorf([]any{"sources", i}, "names several kinds (%s); use one entry per source", kind)
		case s.Flush < 0:
			return f.errorf([]any{"sources", i, "flush"}, "%v: must not be negative", s.Flush)
		case s.Framing != "" && (s.UDP != nil || s.MQTT != nil):
			return f.errorf([]any{"sources", i, "framing"}, "%q: %s sources cannot be framed (udp keeps datagram boundaries; mqtt frames its own packets)", s.Framing, kind)
		}
		if _, err := srcs.ParseFraming(s.Framing); err != nil {
			return f.errorf([]any{"sources", i, "framing"}, "%v", err)
		}
		at := func(key string) []any { return []any{"sources", i, kind, key} }
		switch {
		case s.TCP != nil && s.TCP.Listen == "":
			return f.errorf(at("listen"), "required (host:port)")
		case s.Unix != nil && s.Unix.Listen == "":
			return f.errorf(at("listen"), "required (a socket path)")
		case s.Unix != nil && s.Unix.ReusePort:
			return f.errorf(at("reuse_port"), "applies to tcp listeners only")
		case s.Unix != nil && s.Unix.RecvBuffer != 0:
			return f.errorf(at("recv_buffer"), "applies to tcp listeners only")
		case s.TCP != nil && s.TCP.RecvBuffer < 0:
			return f.errorf(at("recv_buffer"), "%d: must not be negative", s.TCP.RecvBuffer)
		case s.UDP != nil && s.UDP.Addr == "":
			return f.errorf(at("addr"), "required (host:port)")
		case s.TCPClient != nil && s.TCPClient.Addr == "":
			return f.errorf(at("addr"), "required (host:port)")
		case s.UnixClient != nil && s.UnixClient.Path == "":
			return f.errorf(at("path"), "required")
		case s.File != nil && s.File.Path == "":
			return f.errorf(at("path"), "required")
		case s.Tail != nil && s.Tail.Path == "":
			return f.errorf(at("path"), "required")
		case s.MQTT != nil && s.MQTT.Broker == "":
			return f.errorf(at("broker"), "required (host:port)")
		case s.MQTT != nil && len(s.MQTT.Topics) == 0:
			return f.errorf(at("topics"), "required (at least one topic filter)")
		}
	}
	if js := c.Output.JetStream; js != nil && js.Subject == "" {
		return f.errorf([]any{"output", "jetstream", "subject"}, "required")
	}
	if c.Metrics.PerSource < 0 {
		return f.errorf([]any{"metrics", "per_source"}, "%d: must not be negative", c.Metrics.PerSource)
	}
	if c.DrainTimeout < 0 {
		return f.errorf([]any{"drain_timeout"}, "%v: must not be negative", c.DrainTimeout)
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	// Let the sources check the rest of their fields now, before anything
	// listens; their errors name the field.
	for i, s := range c.Sources {
		kind, _ := s.kind()
		var err error
		switch {
		case s.TCPClient != nil:
			_, err = srcs.NewTCPClient(*s.TCPClient)
		case s.UnixClient != nil:
			_, err = srcs.NewUnixClient(*s.UnixClient)
		case s.MQTT != nil:
			_, err = srcs.NewMQTT(*s.MQTT)
		case s.TCP != nil && s.TCP.MaxConns < 0, s.Unix != nil && s.Unix.MaxConns < 0:
			return f.errorf([]any{"sources", i, kind, "max_conns"}, "must not be negative")
		}
		if err != nil {
			return f.errorf([]any{"sources", i, kind}, "%v", err)
		}
	}
	return nil
}

// ErrForced is returned by RunNode when a second signal cut the drain
// short.
var ErrForced = errors.New("bench: node: second signal: exiting without finishing the drain")

// NodeReport is what RunNode returns after a drain.
type NodeReport struct {
	Bytes     uint64 // bytes the engine received
	Delivered uint64 // chunks delivered to the output
	Published uint64 // chunks published to JetStream (with that output)
	Addrs     []string
	Metrics   string // the metrics listener's address, if any
}

// RunNode runs an ingest node until ctx ends or SIGINT or SIGTERM
// arrives, then drains: listeners stop accepting, every source stops and
// delivers what it read, the output acknowledges and releases every
// chunk, and tails save their checkpoints. A second signal during the
// drain returns ErrForced at once.
func RunNode(ctx context.Context, fl NodeFlags, ios IO) (*NodeReport, error) {
	cfg, err := LoadNodeConfig(fl.Config)
	if err != nil {
		return nil, err
	}
	// Count signals ourselves: the first drains, the second forces.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	log := slog.New(slog.NewTextHandler(ios.Err, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var pub *jetstream.Publisher
	var delivered atomic.Uint64
	handle := func(c engine.Chunk) {
		if len(c.Data) > 0 {
			delivered.Add(1)
		}
		c.Release()
	}
	if js := cfg.Output.JetStream; js != nil {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		pub, err = jetstream.New(octx, *js, jetstream.WithErrorHandler(func(err error) { log.Warn("jetstream", "err", err) }))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench: %s: output.jetstream: %w", fl.Config, err)
		}
		handle = func(c engine.Chunk) {
			if len(c.Data) > 0 {
				delivered.Add(1)
			}
			pub.Handle(c)
		}
		buf := cfg.Engine.BufSize
		if buf == 0 {
			buf = engine.DefaultBufSize
		}
		if mp := pub.MaxPayload(); int64(buf) > mp {
			pub.Close(context.Background())
			return nil, fmt.Errorf("bench: %s: engine.buf_size: %d: above the NATS server's max_payload (%d) of output.jetstream", fl.Config, buf, mp)
		}
	}
	e, err := engine.New(cfg.Engine, engine.WithHandler(handle), engine.WithLogger(log),
		engine.WithErrorHandler(func(err error) { log.Warn("source", "err", err) }))
	if err != nil {
		if pub != nil {
			pub.Close(context.Background())
		}
		return nil, fmt.Errorf("bench: %s: engine: %w", fl.Config, err)
	}
	n := &node{e: e, pub: pub, log: log}
	rep := &NodeReport{}
	if err := n.addSources(cfg, fl.Config, rep); err != nil {
		n.shutdown(context.Background())
		return nil, err
	}
	if fl.Metrics != "" {
		addr, err := n.serveMetrics(fl.Metrics, fl.Pprof, cfg.Metrics.PerSource)
		if err != nil {
			n.shutdown(context.Background())
			return nil, err
		}
		rep.Metrics = addr
	}
	out := "counting and releasing chunks"
	if pub != nil {
		out = "publishing to JetStream subject " + cfg.Output.JetStream.Subject
	}
	fmt.Fprintf(ios.Err, "sluice-bench sink: node ready: %d sources, runner %s, %s\n", len(cfg.Sources), e.Runner(), out)
	for _, a := range rep.Addrs {
		fmt.Fprintf(ios.Err, "sluice-bench sink: listening on %s\n", a)
	}
	if rep.Metrics != "" {
		fmt.Fprintf(ios.Err, "sluice-bench sink: metrics on http://%s/metrics\n", rep.Metrics)
	}

	// The first signal drains. It reaches both sigs and, through the
	// command's signal.NotifyContext, ctx, in either order; so signals are
	// counted on sigs alone, and the second one forces.
	signals := 0
	select {
	case <-ctx.Done():
	case <-sigs:
		signals++
	}
	fmt.Fprintf(ios.Err, "sluice-bench sink: draining (a second signal forces exit)\n")
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- n.shutdown(dctx) }()
	for {
		select {
		case err := <-drained:
			t := e.Totals()
			rep.Bytes, rep.Delivered = t.Bytes, delivered.Load()
			if pub != nil {
				rep.Published = pub.Stats().Acked
			}
			if err != nil {
				return rep, fmt.Errorf("bench: node: drain: %w", err)
			}
			fmt.Fprintf(ios.Err, "sluice-bench sink: drained: %s received, %d chunks delivered\n", FormatBytes(rep.Bytes), rep.Delivered)
			return rep, nil
		case <-sigs:
			if signals++; signals >= 2 {
				cancel()
				fmt.Fprintf(ios.Err, "sluice-bench sink: second signal: exiting without finishing the drain\n")
				return rep, ErrForced
			}
		}
	}
}

// node is a running ingest node.
type node struct {
	e       *engine.Engine
	pub     *jetstream.Publisher
	log     *slog.Logger
	tails   []*srcs.Tail
	srv     *http.Server
	srvDone chan struct{}
}

func (n *node) addSources(cfg NodeConfig, path string, rep *NodeReport) error {
	for i, s := range cfg.Sources {
		kind, _ := s.kind()
		fail := func(err error) error { return fmt.Errorf("bench: %s: sources[%d].%s: %w", path, i, kind, err) }
		var opts []engine.SourceOption
		if s.Flush > 0 {
			opts = append(opts, engine.WithFlush(s.Flush))
		}
		framer, err := srcs.ParseFraming(s.Framing) // checked by validate
		if err != nil {
			return fail(err)
		}
		if framer != nil {
			opts = append(opts, engine.WithFraming(framer))
		}
		var src srcs.Source
		switch {
		case s.TCP != nil, s.Unix != nil:
			var ln *srcs.Listener
			if s.TCP != nil {
				lc := s.TCP.ListenerConfig
				lc.Logger, lc.Framer = n.log, framer
				ln, err = srcs.ListenTCP(s.TCP.Listen, lc)
			} else {
				lc := s.Unix.ListenerConfig
				lc.Logger, lc.Framer = n.log, framer
				ln, err = srcs.ListenUnix(s.Unix.Listen, lc)
			}
			if err != nil {
				return fail(err)
			}
			if err := n.e.AddListener(ln); err != nil {
				ln.Close()
				return fail(err)
			}
			rep.Addrs = append(rep.Addrs, kind+"://"+ln.Addr().String())
			continue
		case s.UDP != nil:
			var u *srcs.UDPSource
			u, err = srcs.ListenUDP(*s.UDP)
			if err == nil {
				rep.Addrs = append(rep.Addrs, "udp://"+u.LocalAddr().String())
			}
			src = u
		case s.TCPClient != nil:
			src, err = srcs.NewTCPClient(*s.TCPClient)
		case s.UnixClient != nil:
			src, err = srcs.NewUnixClient(*s.UnixClient)
		case s.File != nil:
			src, err = srcs.NewFile(*s.File)
		case s.Tail != nil:
			tc := *s.Tail
			tc.Logger = n.log
			var t *srcs.Tail
			t, err = srcs.NewTail(tc)
			if err == nil {
				n.tails = append(n.tails, t)
			}
			src = t
		case s.MQTT != nil:
			src, err = srcs.NewMQTT(*s.MQTT)
		}
		if err != nil {
			return fail(err)
		}
		if _, err := n.e.AddSource(src, opts...); err != nil {
			src.Close()
			return fail(err)
		}
	}
	return nil
}

// serveMetrics starts the metrics endpoint on its own registry and mux.
func (n *node) serveMetrics(addr string, withPprof bool, perSource int) (string, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(n.e, metrics.Options{PerSource: perSource}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if p := n.pub; p != nil {
		counter := func(name, help string, f func(jetstream.Stats) uint64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_jetstream_" + name, Help: help},
				func() float64 { return float64(f(p.Stats())) })
		}
		reg.MustRegister(
			counter("published_total", "Chunks published to JetStream.", func(s jetstream.Stats) uint64 { return s.Published }),
			counter("acked_total", "Chunks JetStream acknowledged (then released).", func(s jetstream.Stats) uint64 { return s.Acked }),
			counter("retries_total", "Publishes sent again after an error or a timeout.", func(s jetstream.Stats) uint64 { return s.Retries }),
			counter("duplicates_total", "Acknowledgements JetStream flagged as duplicates.", func(s jetstream.Stats) uint64 { return s.Duplicates }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_jetstream_pending", Help: "Chunks awaiting their acknowledgement."},
				func() float64 { return float64(p.Stats().Pending) }))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("bench: --metrics: %w", err)
	}
	n.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	n.srvDone = make(chan struct{})
	go func() {
		defer close(n.srvDone)
		n.srv.Serve(ln)
	}()
	return ln.Addr().String(), nil
}

// shutdown drains: the engine stops its sources and waits until every
// chunk is released (for JetStream: acknowledged), then the publisher
// closes, tails save their checkpoints, and the metrics server stops
// last, so a final scrape still sees the drain.
func (n *node) shutdown(ctx context.Context) error {
	err := n.e.Shutdown(ctx)
	if n.pub != nil {
		err = errors.Join(err, n.pub.Close(ctx))
	}
	for _, t := range n.tails {
		err = errors.Join(err, t.Flush())
	}
	if n.srv != nil {
		n.srv.Close()
		<-n.srvDone
	}
	return err
}
