package jetstream

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/trust"
)

// Config configures a Publisher. It is plain data with YAML tags, as it
// appears under a node's output: jetstream section.
type Config struct {
	// URL is the NATS server (or comma-separated servers of a cluster).
	// Default nats.DefaultURL (nats://127.0.0.1:4222).
	URL string `yaml:"url"`
	// Subject receives the messages that name no subject of their own:
	// every chunk Handle publishes, and in a node the records of byte
	// sources. Required.
	Subject string `yaml:"subject"`
	// MQTTSubject is the template of the subjects of MQTT messages in a
	// node: literal tokens, then {topic}, which stands for the message's
	// topic, each level a token (see Template). Default: Subject, then
	// .{topic}.
	MQTTSubject string `yaml:"mqtt_subject"`
	// Records says what a node publishes of a framed source's chunk:
	// each (the default), one message per record; or batch, one message
	// per chunk's records, which costs less per record but repeats the
	// records of a batch cut differently after a restart (see
	// docs/jetstream.md).
	Records string `yaml:"records"`
	// Stream, if set, is created over Subject and MQTTSubject's subjects
	// when it does not exist. An existing stream is used as it is.
	Stream string `yaml:"stream"`
	// Storage is the storage of a stream created for Stream: "file" (the
	// default) or "memory".
	Storage string `yaml:"storage"`
	// Replicas is the replica count of a stream created for Stream, on a
	// cluster. Default 1.
	Replicas int `yaml:"replicas"`
	// DuplicateWindow is the de-duplication window of a stream created
	// for Stream: a chunk sent again within it after its first copy is
	// stored once. Default JetStream's, two minutes.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// MaxPending caps the messages the publisher holds: those awaiting an
	// acknowledgement and those waiting behind an earlier message of their
	// source. Past it, the processing goroutine waits, holding its chunk.
	// Default 4096.
	MaxPending int `yaml:"max_pending"`
	// AckTimeout is how long an acknowledgement may take before the chunk
	// is published again (with the same message id). Default 5s.
	AckTimeout time.Duration `yaml:"ack_timeout"`
	// RetryWait is the pause before publishing again after an error.
	// Default 100ms.
	RetryWait time.Duration `yaml:"retry_wait"`
	// NoPipeline sends every source's chunks one per round trip, never a
	// chunk before the previous one of its source is acknowledged. The
	// publisher pipelines only when connected to a server outside any
	// cluster; set this where such a server is a leaf node of a cluster
	// that holds the stream.
	NoPipeline bool `yaml:"no_pipeline"`
	// IDPrefix starts the ids of messages whose source cannot replay
	// (Handle's, and in a node those of sockets). Default: the host name
	// and the publisher's start time, so that ids of two nodes, or of one
	// node before and after a restart, never meet. A node adds its start
	// time to a prefix set here; a program that sets it must change it at
	// every start: ids repeat after a restart (sources and sequence
	// numbers start again), and JetStream drops a repeated id within its
	// duplicate window as a duplicate.
	IDPrefix string `yaml:"id_prefix"`
	// Name is the NATS connection's name. Default "sluice".
	Name string `yaml:"name"`

	// Credentials: at most one of user and password, a token, an NKey
	// seed file, or a creds file (a user JWT with its NKey seed, as nsc
	// writes it). A password or token may come inline, from a file
	// (password_file, token_file: its content, trailing white space
	// trimmed) or from an environment variable (password_env, token_env:
	// its name). Secrets are never logged and print redacted.
	User         string      `yaml:"user"`
	Password     srcs.Secret `yaml:"password"`
	PasswordFile string      `yaml:"password_file"`
	PasswordEnv  string      `yaml:"password_env"`
	Token        srcs.Secret `yaml:"token"`
	TokenFile    string      `yaml:"token_file"`
	TokenEnv     string      `yaml:"token_env"`
	NKeySeedFile string      `yaml:"nkey_seed_file"`
	CredsFile    string      `yaml:"creds_file"`
	// TLS, when set, requires TLS to the servers, verified against
	// tls.ca_file (or the system's roots), with a client certificate if
	// tls.cert_file is set. client_auth does not apply.
	TLS *srcs.TLSConfig `yaml:"tls"`
}

// redactURL hides the passwords and tokens that server URLs may carry
// (nats://user:password@host, nats://token@host) for errors and logs.
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); !ok {
			u.User = url.User("xxxxx") // a token: nats://token@host
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// authOptions resolves the credentials of a checked Config into NATS
// options. Errors name the YAML keys.
func (c Config) authOptions() ([]nats.Option, error) {
	pw, err := srcs.LoadSecret("password", c.Password, c.PasswordFile, c.PasswordEnv)
	if err != nil {
		return nil, err
	}
	tok, err := srcs.LoadSecret("token", c.Token, c.TokenFile, c.TokenEnv)
	if err != nil {
		return nil, err
	}
	var opts []nats.Option
	kinds := 0
	if c.User != "" || pw != "" {
		if c.User == "" {
			return nil, errors.New("password: set without user")
		}
		kinds++
		opts = append(opts, nats.UserInfo(c.User, pw.Reveal()))
	}
	if tok != "" {
		kinds++
		opts = append(opts, nats.Token(tok.Reveal()))
	}
	if c.NKeySeedFile != "" {
		kinds++
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey_seed_file: %w", err)
		}
		opts = append(opts, o)
	}
	if c.CredsFile != "" {
		kinds++
		if _, err := os.Stat(c.CredsFile); err != nil {
			return nil, fmt.Errorf("creds_file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if kinds > 1 {
		return nil, errors.New("user and password, token, nkey_seed_file, creds_file: set one at most")
	}
	if c.TLS != nil {
		tc, err := trust.ClientConfig(c.TLS, "")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// Config.Records values.
const (
	RecordsEach  = "each"
	RecordsBatch = "batch"
)

// WithDefaults returns c checked, with its defaults filled in: what New
// runs with, but for IDPrefix's, which depends on the moment. Errors name
// the YAML key.
func (c Config) WithDefaults() (Config, error) {
	prefix := c.IDPrefix
	c.IDPrefix = "-"
	c, err := c.withDefaults()
	c.IDPrefix = prefix
	return c, err
}

// Defaults.
const (
	DefaultMaxPending = 4096
	DefaultAckTimeout = 5 * time.Second
	DefaultRetryWait  = 100 * time.Millisecond
)

func (c Config) withDefaults() (Config, error) {
	if c.URL == "" {
		c.URL = nats.DefaultURL
	}
	switch {
	case c.Subject == "":
		return c, errors.New("jetstream: config: subject: required")
	case c.MaxPending < 0:
		return c, fmt.Errorf("jetstream: config: max_pending: %d: must not be negative", c.MaxPending)
	case c.AckTimeout < 0:
		return c, fmt.Errorf("jetstream: config: ack_timeout: %v: must not be negative", c.AckTimeout)
	case c.Storage != "" && c.Storage != "file" && c.Storage != "memory":
		return c, fmt.Errorf("jetstream: config: storage: %q: must be file or memory", c.Storage)
	case c.RetryWait < 0:
		return c, fmt.Errorf("jetstream: config: retry_wait: %v: must not be negative", c.RetryWait)
	case c.Replicas < 0 || c.Replicas > 5:
		return c, fmt.Errorf("jetstream: config: replicas: %d: must be from 0 (default) to 5", c.Replicas)
	case c.DuplicateWindow < 0:
		return c, fmt.Errorf("jetstream: config: duplicate_window: %v: must not be negative", c.DuplicateWindow)
	case c.Records != "" && c.Records != RecordsEach && c.Records != RecordsBatch:
		return c, fmt.Errorf("jetstream: config: records: %q: must be each or batch", c.Records)
	}
	if err := checkSubject(c.Subject, false); err != nil {
		return c, fmt.Errorf("jetstream: config: subject: %q: %w", c.Subject, err)
	}
	if c.MQTTSubject == "" {
		c.MQTTSubject = c.Subject + "." + TopicVar
	}
	if _, err := ParseTemplate(c.MQTTSubject); err != nil {
		return c, fmt.Errorf("jetstream: config: mqtt_subject: %w", err)
	}
	if c.Records == "" {
		c.Records = RecordsEach
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.RetryWait == 0 {
		c.RetryWait = DefaultRetryWait
	}
	if c.IDPrefix == "" {
		host, _ := os.Hostname()
		c.IDPrefix = host + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if c.Name == "" {
		c.Name = "sluice"
	}
	return c, nil
}
