package node

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// Config is a node file: engine settings, sources, one output, the
// metrics endpoint, logging and the drain. Unknown keys are errors. It is
// plain data; Load fills the defaults documented here.
type Config struct {
	// Engine is the engine's configuration (buffers, runner, flush, ...).
	Engine engine.Config `yaml:"engine"`
	// Sources lists what the node ingests; at least one.
	Sources []Source `yaml:"sources"`
	// Output says where chunks go; at most one kind. Without one the node
	// counts chunks and releases them.
	Output Output `yaml:"output"`
	// Metrics shapes the HTTP endpoint of /metrics and /healthz.
	Metrics Metrics `yaml:"metrics"`
	// Log shapes the node's log, on standard error.
	Log Log `yaml:"log"`
	// DrainTimeout bounds the drain after SIGINT or SIGTERM. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// DefaultDrainTimeout is Config.DrainTimeout's default.
const DefaultDrainTimeout = 30 * time.Second

// Source is one entry of the sources list: exactly one kind, plus the
// options every kind takes.
type Source struct {
	// TCP listens for TCP connections; each one accepted is a source.
	TCP *Listener `yaml:"tcp,omitempty"`
	// Unix listens on a unix socket; each connection accepted is a source.
	Unix *Listener `yaml:"unix,omitempty"`
	// UDP receives datagrams on one socket.
	UDP *srcs.UDPConfig `yaml:"udp,omitempty"`
	// TCPClient dials a TCP peer and reads what it sends, reconnecting
	// with backoff.
	TCPClient *srcs.TCPClientConfig `yaml:"tcp_client,omitempty"`
	// UnixClient dials a unix socket, reconnecting with backoff.
	UnixClient *srcs.UnixClientConfig `yaml:"unix_client,omitempty"`
	// File reads a file once (or repeat times) from an offset.
	File *srcs.FileConfig `yaml:"file,omitempty"`
	// Tail follows a growing file through rotation and truncation.
	Tail *Tail `yaml:"tail,omitempty"`
	// MQTT subscribes to topics on a broker, reconnecting with backoff.
	MQTT *mqtt.MQTTConfig `yaml:"mqtt,omitempty"`
	// Flush overrides the engine's flush timeout for this source (for a
	// listener: for each of its connections).
	Flush time.Duration `yaml:"flush,omitempty"`
	// Framing delivers the source (for a listener: each connection) in
	// whole records: none, newline[:MAX], length:N{be,le}[:MAX],
	// octet[:MAX] or mqtt[:MAX]. Not for udp, whose datagrams keep their
	// own boundaries, nor mqtt, which frames its own packets.
	Framing string `yaml:"framing,omitempty"`
	// RateLimit holds the source (for a listener: each connection on its
	// own) to a number of bytes a second by not reading it while it is
	// ahead: TCP's window then slows that sender alone and nothing is
	// lost (a udp socket drops what its buffer cannot hold, counted as
	// kernel drops). Default: no limit.
	RateLimit *RateLimit `yaml:"rate_limit,omitempty"`
	// IdleTimeout closes the source (for a listener: each connection)
	// once it has delivered nothing for this long, so that a listener
	// with max_conns does not fill with dead peers. Default 0: never.
	IdleTimeout time.Duration `yaml:"idle_timeout,omitempty"`
	// MsgID names a key the producer puts in each record or message, from
	// which the jetstream output makes the message's id, so that a
	// record sent twice is stored once. Without one, ids come from what
	// the source can replay (see docs/jetstream.md).
	MsgID *MsgID `yaml:"msg_id,omitempty"`
}

// MsgID is where a source's records carry their producer's key. A record
// without a usable key (missing, empty, longer than 256 bytes, or holding
// a line break) gets the id it would have without msg_id.
type MsgID struct {
	// UserProperty is an MQTT 5 user property (mqtt with version: 5).
	UserProperty string `yaml:"user_property,omitempty"`
	// Field is a top-level field of a JSON object: an MQTT message's
	// payload, a framed record without its framing, or a datagram. A
	// string's text, or a number as written.
	Field string `yaml:"field,omitempty"`
}

// RateLimit is a source's rate limit.
type RateLimit struct {
	// BytesPerSecond is the rate, a byte count such as 1MiB.
	BytesPerSecond int64 `yaml:"bytes_per_second"`
	// Burst is what a source that was quiet for a while may read at once.
	// Default (and least): one pool buffer.
	Burst int64 `yaml:"burst"`
}

// Listener is a tcp or unix listener entry: where to listen, and the
// listener's options.
type Listener struct {
	// Listen is host:port for tcp, a socket path for unix.
	Listen              string `yaml:"listen"`
	srcs.ListenerConfig `yaml:",inline"`
}

// Tail is a tail entry: the file to follow, and whether the node may
// start before the file exists.
type Tail struct {
	srcs.TailConfig `yaml:",inline"`
	// WaitForFile lets the node start while the file does not exist yet:
	// it says so once, looks for the file every poll interval, and
	// follows it from its start once it appears. Without it, a missing
	// file fails the node at start-up.
	WaitForFile bool `yaml:"wait_for_file"`
}

// Output says where chunks go. At most one kind may be set.
type Output struct {
	// JetStream publishes every chunk into a NATS JetStream stream and
	// releases it when the stream has stored it.
	JetStream *jetstream.Config `yaml:"jetstream,omitempty"`
	// Stdout writes what arrives to standard output.
	Stdout *Writer `yaml:"stdout,omitempty"`
	// File appends what arrives to a file.
	File *FileOutput `yaml:"file,omitempty"`
}

// Output formats of Writer.Format.
const (
	FormatRecords = "records"
	FormatChunks  = "chunks"
)

// Writer is the stdout output: how chunks are written.
type Writer struct {
	// Format is records (the default: the bytes as they arrived, in
	// whole lines, with datagrams and MQTT messages one per line) or
	// chunks (each chunk behind a header line naming its source, sequence
	// number, flags and length). In records, a line never holds two
	// sources' bytes: an unframed source's unfinished line waits for its
	// end, and a record a source never finished (closed, or cut by the
	// drain, in its middle) is written on a line of its own behind a
	// marker line, sluice-truncated source=ID bytes=N name="NAME", then
	// exactly N bytes and a newline. See docs/node.md, "Outputs".
	Format string `yaml:"format"`
}

// FileOutput is the file output.
type FileOutput struct {
	// Path is the file, created if missing and appended to.
	Path string `yaml:"path"`
	// Format is records (default) or chunks, as for stdout.
	Format string `yaml:"format"`
	// Sync fsyncs the file before each chunk is released, so a chunk
	// released is a chunk on disk (a tail's checkpoint then never runs
	// ahead of the file). Default false: the file is synced at the drain.
	Sync bool `yaml:"sync"`
}

// Metrics shapes the HTTP endpoint.
type Metrics struct {
	// Listen serves /metrics (Prometheus) and /healthz on host:port.
	// Empty: no endpoint, unless the command line asks for one.
	Listen string `yaml:"listen"`
	// WebConfigFile is a Prometheus web configuration file, as every
	// Prometheus exporter reads it (github.com/prometheus/exporter-toolkit):
	// tls_server_config (cert_file, key_file, client_ca_file,
	// client_auth_type, ...) serves the endpoint over TLS, and
	// basic_auth_users (user: bcrypt hash) asks for a password on every
	// path, /healthz and /debug/pprof/ included. The file is read again
	// for every request and every TLS handshake, so users and renewed
	// certificates apply without a restart. Empty: plain HTTP, open to
	// anyone who can reach the port.
	WebConfigFile string `yaml:"web_config_file"`
	// PerSource exports per-source series for at most this many sources.
	// Default 0: none.
	PerSource int `yaml:"per_source"`
	// Pprof also serves /debug/pprof/ on the endpoint. Default false: the
	// profiles (and the command line) are not served.
	Pprof bool `yaml:"pprof"`
}

// Log shapes the node's log.
type Log struct {
	// Format is text (the default: logfmt-like key=value lines) or json
	// (one JSON object per line).
	Format string `yaml:"format"`
	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
	// Status logs a status line this often: bytes, records, chunks,
	// sources by state, errors. Default 0: none.
	Status time.Duration `yaml:"status"`
}

// sourceKinds are the kinds of a source entry, in the order the
// reference lists them.
var sourceKinds = []string{"tcp", "unix", "udp", "tcp_client", "unix_client", "file", "tail", "mqtt"}

// Kind names the one kind the entry sets, or "" if it sets none or
// several.
func (s Source) Kind() string {
	if k := s.kinds(); len(k) == 1 {
		return k[0]
	}
	return ""
}

func (s Source) kinds() []string {
	set := map[string]bool{
		"tcp": s.TCP != nil, "unix": s.Unix != nil, "udp": s.UDP != nil, "tcp_client": s.TCPClient != nil,
		"unix_client": s.UnixClient != nil, "file": s.File != nil, "tail": s.Tail != nil, "mqtt": s.MQTT != nil,
	}
	var names []string
	for _, k := range sourceKinds {
		if set[k] {
			names = append(names, k)
		}
	}
	return names
}

// Name is how logs, /healthz and errors name the entry: its kind and its
// address or path, as sources[i] would not tell an operator much.
func (s Source) Name() string {
	switch {
	case s.TCP != nil:
		return "tcp " + s.TCP.Listen
	case s.Unix != nil:
		return "unix " + s.Unix.Listen
	case s.UDP != nil:
		return "udp " + s.UDP.Addr
	case s.TCPClient != nil:
		return "tcp_client " + s.TCPClient.Addr
	case s.UnixClient != nil:
		return "unix_client " + s.UnixClient.Path
	case s.File != nil:
		return "file " + s.File.Path
	case s.Tail != nil:
		return "tail " + s.Tail.Path
	case s.MQTT != nil:
		return "mqtt " + s.MQTT.Broker
	}
	return "(none)"
}

// file is a node file being checked: its name, its YAML tree for naming
// lines, and the config decoded from it.
type file struct {
	name string
	data []byte // the file as read
	root *yaml.Node
	cfg  Config
}

// ErrEmpty is wrapped by the *ConfigError of a node file with no keys.
var ErrEmpty = errors.New("the file is empty")

// Load reads the node file at path and checks it as far as can be done
// without opening anything: unknown keys, values of the wrong type, and
// values the engine, the sources or the output would refuse. Errors are
// *ConfigError values naming the file, the line and the key.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("node: config: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load for a file already read; name is how errors name it.
func Parse(name string, data []byte) (Config, error) {
	f := &file{name: name, data: data, root: &yaml.Node{}}
	if err := yaml.Unmarshal(data, f.root); err != nil {
		return Config{}, f.yamlError(err)
	}
	if len(f.root.Content) == 0 || len(bytes.TrimSpace(data)) == 0 {
		return Config{}, &ConfigError{File: name, Msg: ErrEmpty.Error() + ": a node needs at least a sources: list (see examples/node.yaml)", Err: ErrEmpty}
	}
	if doc := f.root.Content[0]; doc.Kind != yaml.MappingNode {
		return Config{}, &ConfigError{File: name, Line: doc.Line,
			Msg: "the file must be a mapping of keys (" + strings.Join(yamlKeys(reflect.TypeFor[Config]()), ", ") + ")"}
	}
	data, err := f.expandByteUnits(data)
	if err != nil {
		return Config{}, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f.cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, f.yamlError(err)
	}
	if err := f.validate(); err != nil {
		return Config{}, err
	}
	return f.cfg, nil
}

func (f *file) validate() error {
	c := &f.cfg
	if err := c.Engine.Validate(); err != nil {
		var ce *engine.ConfigError
		if errors.As(err, &ce) {
			key := goToYAML(reflect.TypeFor[engine.Config](), ce.Field)
			return f.errorf([]any{"engine", key}, "%v: %s", ce.Value, yamlizeWords(reflect.TypeFor[engine.Config](), ce.Reason))
		}
		return f.errorf([]any{"engine"}, "%v", err)
	}
	if len(c.Sources) == 0 {
		return f.errorf([]any{"sources"}, "the node needs at least one source")
	}
	for i, s := range c.Sources {
		kinds := s.kinds()
		switch {
		case len(kinds) == 0:
			return f.errorf([]any{"sources", i}, "names no kind (one of %s)", strings.Join(sourceKinds, ", "))
		case len(kinds) > 1:
			return f.errorf([]any{"sources", i}, "names several kinds (%s); use one entry per source", strings.Join(kinds, ", "))
		case s.Flush < 0:
			return f.errorf([]any{"sources", i, "flush"}, "%v: must not be negative", s.Flush)
		case s.IdleTimeout < 0:
			return f.errorf([]any{"sources", i, "idle_timeout"}, "%v: must not be negative", s.IdleTimeout)
		case s.RateLimit != nil && s.RateLimit.BytesPerSecond <= 0:
			return f.errorf([]any{"sources", i, "rate_limit", "bytes_per_second"}, "%d: must be a positive byte count (%s)", s.RateLimit.BytesPerSecond, byteUnitsHint)
		case s.RateLimit != nil && s.RateLimit.Burst < 0:
			return f.errorf([]any{"sources", i, "rate_limit", "burst"}, "%d: must not be negative", s.RateLimit.Burst)
		case s.MsgID != nil && c.Output.JetStream == nil:
			return f.errorf([]any{"sources", i, "msg_id"}, "applies to the jetstream output only")
		case s.MsgID != nil && (s.MsgID.UserProperty == "") == (s.MsgID.Field == ""):
			return f.errorf([]any{"sources", i, "msg_id"}, "set one of user_property and field")
		case s.MsgID != nil && s.MsgID.UserProperty != "" && (s.MQTT == nil || s.MQTT.Version != 5):
			return f.errorf([]any{"sources", i, "msg_id", "user_property"}, "needs an mqtt source with version: 5")
		case s.MsgID != nil && s.MQTT == nil && s.UDP == nil && s.Framing == "":
			return f.errorf([]any{"sources", i, "msg_id"}, "needs records: set framing (a stream of bytes has no fields)")
		case s.Framing != "" && (s.UDP != nil || s.MQTT != nil):
			return f.errorf([]any{"sources", i, "framing"}, "%q: %s sources cannot be framed (udp keeps datagram boundaries; mqtt frames its own packets)", s.Framing, kinds[0])
		}
		if _, err := srcs.ParseFraming(s.Framing); err != nil {
			return f.errorf([]any{"sources", i, "framing"}, "%s", strings.TrimPrefix(err.Error(), "srcs: "))
		}
		kind := kinds[0]
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
		case s.TCP != nil && s.TCP.MaxConns < 0, s.Unix != nil && s.Unix.MaxConns < 0:
			return f.errorf(at("max_conns"), "must not be negative")
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
		if err := f.checkAddresses(i, kind, s); err != nil {
			return err
		}
		// Let the sources check the rest of their fields now, before
		// anything listens; their errors name Go fields, which
		// sourceError turns into keys.
		var err error
		var typ reflect.Type
		switch {
		case s.TCPClient != nil:
			// A client reads its TLS files when it is made: check their
			// form here, and leave the files to Preflight's warnings, as
			// a listener's are.
			c := *s.TCPClient
			if c.TLS != nil {
				if key, msg := tlsForm(c.TLS, false); msg != "" {
					return f.errorf(append([]any{"sources", i, kind}, key...), "%s", msg)
				}
				c.TLS = nil
			}
			_, err = srcs.NewTCPClient(c)
			typ = reflect.TypeFor[srcs.TCPClientConfig]()
		case s.UnixClient != nil:
			_, err = srcs.NewUnixClient(*s.UnixClient)
			typ = reflect.TypeFor[srcs.UnixClientConfig]()
		case s.MQTT != nil:
			c := *s.MQTT
			if c.TLS != nil {
				if key, msg := tlsForm(c.TLS, false); msg != "" {
					return f.errorf(append([]any{"sources", i, kind}, key...), "%s", msg)
				}
				c.TLS = nil
			}
			_, err = mqtt.NewMQTT(c)
			typ = reflect.TypeFor[mqtt.MQTTConfig]()
		case s.Tail != nil:
			_, err = srcs.NewTail(s.Tail.TailConfig)
			typ = reflect.TypeFor[Tail]()
		case s.File != nil:
			_, err = srcs.NewFile(*s.File)
			typ = reflect.TypeFor[srcs.FileConfig]()
		}
		if err != nil {
			sub, msg := sourceError(typ, err)
			return f.errorf(append([]any{"sources", i, kind}, sub...), "%s", msg)
		}
	}
	if err := f.checkSharedAddresses(); err != nil {
		return err
	}
	if err := f.checkSharedState(); err != nil {
		return err
	}
	if kinds := c.Output.kinds(); len(kinds) > 1 {
		return f.errorf([]any{"output"}, "names several outputs (%s); a node has one", strings.Join(kinds, ", "))
	}
	if js := c.Output.JetStream; js != nil && js.Subject == "" {
		return f.errorf([]any{"output", "jetstream", "subject"}, "required")
	}
	if js := c.Output.JetStream; js != nil {
		if err := f.checkJetStream(js); err != nil {
			return err
		}
	}
	if js := c.Output.JetStream; js != nil && js.CredsFile != "" {
		if err := checkCredsFile(js.CredsFile); err != nil {
			return f.errorf([]any{"output", "jetstream", "creds_file"}, "%v", err)
		}
	}
	if w := c.Output.Stdout; w != nil {
		if w.Format == "" {
			w.Format = FormatRecords
		}
		if !slices.Contains([]string{FormatRecords, FormatChunks}, w.Format) {
			return f.errorf([]any{"output", "stdout", "format"}, "%q: must be records or chunks", w.Format)
		}
	}
	if w := c.Output.File; w != nil {
		if w.Format == "" {
			w.Format = FormatRecords
		}
		switch {
		case w.Path == "":
			return f.errorf([]any{"output", "file", "path"}, "required")
		case !slices.Contains([]string{FormatRecords, FormatChunks}, w.Format):
			return f.errorf([]any{"output", "file", "format"}, "%q: must be records or chunks", w.Format)
		}
	}
	if c.Metrics.Listen != "" {
		if err := checkHostPort(c.Metrics.Listen); err != nil {
			return f.errorf([]any{"metrics", "listen"}, "%v", err)
		}
	}
	if c.Metrics.PerSource < 0 {
		return f.errorf([]any{"metrics", "per_source"}, "%d: must not be negative", c.Metrics.PerSource)
	}
	switch c.Log.Format {
	case "":
		c.Log.Format = "text"
	case "text", "json":
	default:
		return f.errorf([]any{"log", "format"}, "%q: must be text or json", c.Log.Format)
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		return f.errorf([]any{"log", "level"}, "%q: must be debug, info, warn or error", c.Log.Level)
	}
	if c.Log.Status < 0 {
		return f.errorf([]any{"log", "status"}, "%v: must not be negative", c.Log.Status)
	}
	if c.DrainTimeout < 0 {
		return f.errorf([]any{"drain_timeout"}, "%v: must not be negative", c.DrainTimeout)
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	return nil
}

func (o Output) kinds() []string {
	var k []string
	if o.JetStream != nil {
		k = append(k, "jetstream")
	}
	if o.Stdout != nil {
		k = append(k, "stdout")
	}
	if o.File != nil {
		k = append(k, "file")
	}
	return k
}

// Resolved returns the configuration as the node would run it on this
// machine: every default filled in (the engine's worker and handler
// counts follow GOMAXPROCS; sources, listeners and the output as their
// code fills them), and secrets (passwords, tokens, the credentials of
// URLs) printed as [redacted].
// `sluice check` prints it.
func (c Config) Resolved() ([]byte, error) {
	c = c.withDefaults()
	var n yaml.Node
	if err := n.Encode(c); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	maskSecrets(&n)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	enc.Close()
	return b.Bytes(), nil
}
