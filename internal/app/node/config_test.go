package node

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// TestConfigErrors: every problem is reported as file:line: key: message,
// in the file's terms: no Go type or field names, no package prefixes.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty file", "", "node.yaml: the file is empty: a node needs at least a sources: list"},
		{"only comments", "# nothing yet\n", "node.yaml: the file is empty"},
		{"not a mapping", "- tcp\n", "node.yaml:1: the file must be a mapping of keys (engine, sources, output, metrics, log, drain_timeout)"},
		{"unknown top key", "engine: {}\nsorces: []\n", "node.yaml:2: sorces: unknown key (did you mean sources?); here takes engine, sources,"},
		{"unknown engine key", "engine:\n  bufers: 10\n", "node.yaml:2: engine.bufers: unknown key (did you mean buffers?); engine takes runner, workers, buf_size, buffers,"},
		{"wrong type", "engine:\n  buffers: many\n", "node.yaml:2: engine.buffers: \"many\" is not a whole number"},
		{"bad duration", "engine:\n  flush: soon\n", "node.yaml:2: engine.flush: \"soon\" is not a duration (write it like 250ms, 5s or 1m30s)"},
		{"bad size", "engine:\n  buf_size: 64 kilos\n", "node.yaml:2: engine.buf_size: \"64 kilos\" is not a byte count (write it like 65536, 64KiB or 1MiB)"},
		{"bad nested size", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      recv_buffer: lots\n", "node.yaml:4: sources[0].tcp.recv_buffer: \"lots\" is not a byte count"},
		{"size out of range", "engine:\n  buf_size: 1EiB\n  buffers: 2\nsources:\n  - tcp: {listen: 127.0.0.1:0}\n", "node.yaml:2: engine.buf_size: "},
		{"bare number for a duration", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    idle_timeout: 30\n", "node.yaml:3: sources[0].idle_timeout: \"30\" is not a duration (write it like 250ms, 5s or 1m30s: a number needs a unit, unless it is 0)"},
		{"bad duration in a flow mapping", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    flush: 5x\n", "node.yaml:3: sources[0].flush: \"5x\" is not a duration"},
		{"bad nested duration", "sources:\n  - tcp_client:\n      addr: 127.0.0.1:1\n      backoff: {initial: later}\n", "node.yaml:4: sources[0].tcp_client.backoff.initial: \"later\" is not a duration"},
		{"list for a mapping", "engine: [1, 2]\n", "node.yaml:1: engine: a list must be a mapping of keys (runner, workers,"},
		{"engine value", "engine:\n  runner: fast\nsources:\n  - tcp: {listen: 127.0.0.1:0}\n", "node.yaml:2: engine.runner: fast: must be auto, uring, epoll, goroutine or thread"},
		{"engine watermark", "engine:\n  buffers: 8\n  queue_low: 9\n  queue_high: 4\nsources:\n  - tcp: {listen: 127.0.0.1:0}\n", "node.yaml:3: engine.queue_low: 9: must be below queue_high (4)"},
		{"no sources", "engine: {}\n", "node.yaml:1: sources: the node needs at least one source"},
		{"two kinds", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n  - file: {path: /x}\n    tail: {path: /y}\n", "node.yaml:3: sources[1]: names several kinds (file, tail)"},
		{"no kind", "sources:\n  - flush: 1s\n", "node.yaml:2: sources[0]: names no kind"},
		{"missing listen", "sources:\n  - tcp:\n      max_conns: 3\n", "node.yaml:2: sources[0].tcp.listen: required"},
		{"unknown source key", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      reuseport: true\n", "node.yaml:4: sources[0].tcp.reuseport: unknown key (did you mean reuse_port?)"},
		{"negative cap", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      max_conns: -1\n", "node.yaml:4: sources[0].tcp.max_conns: must not be negative"},
		{"rate limit without a rate", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    rate_limit:\n      burst: 1MiB\n", "node.yaml:3: sources[0].rate_limit.bytes_per_second: 0: must be a positive byte count"},
		{"rate limit not a size", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    rate_limit: {bytes_per_second: fast}\n", "node.yaml:3: sources[0].rate_limit.bytes_per_second: \"fast\" is not a byte count"},
		{"rate limit unknown key", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    rate_limit: {rate: 1MiB}\n", "node.yaml:3: sources[0].rate_limit.rate: unknown key; sources[0].rate_limit takes bytes_per_second, burst"},
		{"negative idle timeout", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    idle_timeout: -1s\n", "node.yaml:3: sources[0].idle_timeout: -1s: must not be negative"},
		{"unix receive buffer", "sources:\n  - unix:\n      listen: /tmp/x.sock\n      recv_buffer: 65536\n", "node.yaml:4: sources[0].unix.recv_buffer: applies to tcp listeners only"},
		{"bad framing", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n    framing: lines\n", "node.yaml:4: sources[0].framing: framing \"lines\": unknown"},
		{"framed udp", "sources:\n  - udp:\n      addr: 127.0.0.1:0\n    framing: newline\n", "node.yaml:4: sources[0].framing: \"newline\": udp sources cannot be framed"},
		{"mqtt topics", "sources:\n  - mqtt:\n      broker: 127.0.0.1:1883\n", "node.yaml:2: sources[0].mqtt.topics: required"},
		{"mqtt qos", "sources:\n  - mqtt:\n      broker: 127.0.0.1:1883\n      client_id: x\n      topics: [a]\n      qos: 3\n", "node.yaml:6: sources[0].mqtt.qos: 3, must be 0, 1 or 2"},
		{"client address", "sources:\n  - tcp_client:\n      addr: nowhere\n", "node.yaml:3: sources[0].tcp_client.addr: \"nowhere\""},
		{"tail poll", "sources:\n  - tail:\n      path: /x\n      poll: -1s\n", "node.yaml:4: sources[0].tail.poll: -1s is negative"},
		{"jetstream subject", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    url: nats://127.0.0.1:1\n", "node.yaml:4: output.jetstream.subject: required"},
		{"jetstream key", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subjct: x\n", "node.yaml:5: output.jetstream.subjct: unknown key (did you mean subject?)"},
		{"two outputs", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  stdout: {}\n  file: {path: /tmp/x}\n", "node.yaml:3: output: names several outputs (stdout, file)"},
		{"output format", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  stdout: {format: lines}\n", "node.yaml:4: output.stdout.format: \"lines\": must be records or chunks"},
		{"log format", "sources:\n  - tcp: {listen: 127.0.0.1:0}\nlog: {format: xml}\n", "node.yaml:3: log.format: \"xml\": must be text or json"},
		{"duplicate key", "engine: {}\nengine: {}\n", "node.yaml:2: key engine given twice (first at line 1)"},
		{"listen without a port", "sources:\n  - tcp:\n      listen: 127.0.0.1\n", "node.yaml:3: sources[0].tcp.listen: \"127.0.0.1\": missing port in address"},
		{"listen port out of range", "sources:\n  - tcp:\n      listen: :99999\n", "node.yaml:3: sources[0].tcp.listen: \":99999\": port 99999 is out of range"},
		{"listen host alone", "sources:\n  - tcp:\n      listen: localhost\n", "node.yaml:3: sources[0].tcp.listen: \"localhost\": missing port"},
		{"listen bad service", "sources:\n  - tcp:\n      listen: :nosuchservice\n", "node.yaml:3: sources[0].tcp.listen: \":nosuchservice\": \"nosuchservice\" is not a port number"},
		{"udp address", "sources:\n  - udp:\n      addr: nonsense\n", "node.yaml:3: sources[0].udp.addr: \"nonsense\": missing port"},
		{"unix path too long", "sources:\n  - unix:\n      listen: /" + strings.Repeat("x", 120) + "\n", "node.yaml:3: sources[0].unix.listen: 121 bytes: a unix socket path takes at most 107"},
		{"allow CIDR", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      allow: [127.0.0.1, 10.0.0.0/99]\n", "node.yaml:4: sources[0].tcp.allow[1]: \"10.0.0.0/99\": not a CIDR or an IP address"},
		{"trusted CIDR", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      proxy_protocol:\n        trusted:\n          - nowhere\n", "node.yaml:6: sources[0].tcp.proxy_protocol.trusted[0]: \"nowhere\": not a CIDR"},
		{"no trusted proxy", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      proxy_protocol: {}\n", "node.yaml:4: sources[0].tcp.proxy_protocol.trusted: no proxy address"},
		{"negative handshake timeout", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      handshake_timeout: -1s\n", "node.yaml:4: sources[0].tcp.handshake_timeout: -1s is negative"},
		{"metrics address", "sources:\n  - tcp: {listen: 127.0.0.1:0}\nmetrics:\n  listen: nonsense\n", "node.yaml:4: metrics.listen: \"nonsense\": missing port"},
		{"jetstream url port", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    url: nats://op:pw@127.0.0.1:99999\n", "node.yaml:6: output.jetstream.url: nats://[redacted]@127.0.0.1:99999: port \"99999\" is not a number"},
		{"jetstream url scheme", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    url: http://127.0.0.1:4222\n", "node.yaml:6: output.jetstream.url: http://127.0.0.1:4222: scheme \"http\" is not nats"},
		{"jetstream storage", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    storage: disk\n", "node.yaml:6: output.jetstream.storage: \"disk\": must be file or memory"},
		{"listener tls version", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      tls: {cert_file: c.pem, key_file: k.pem, min_version: \"1.1\"}\n", "node.yaml:4: sources[0].tcp.tls.min_version: \"1.1\": must be 1.2 or 1.3"},
		{"listener tls without a certificate", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      tls: {key_file: k.pem}\n", "node.yaml:4: sources[0].tcp.tls.cert_file: required on a listener"},
		{"listener client_auth", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      tls: {cert_file: c.pem, key_file: k.pem, client_auth: maybe}\n", "node.yaml:4: sources[0].tcp.tls.client_auth: \"maybe\": must be none, require or verify_if_given"},
		{"listener client_auth without a CA", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      tls: {cert_file: c.pem, key_file: k.pem, client_auth: require}\n", "node.yaml:4: sources[0].tcp.tls.ca_file: required with client_auth require"},
		{"unix listener tls", "sources:\n  - unix:\n      listen: /tmp/x.sock\n      tls: {cert_file: c.pem, key_file: k.pem}\n", "node.yaml:4: sources[0].unix.tls: applies to tcp listeners only"},
		{"unix listener allow", "sources:\n  - unix:\n      listen: /tmp/x.sock\n      allow: [127.0.0.1]\n", "node.yaml:4: sources[0].unix.allow: applies to tcp listeners only"},
		{"udp datagram size", "sources:\n  - udp:\n      addr: 127.0.0.1:0\n      max_datagram: 70000\n", "node.yaml:4: sources[0].udp.max_datagram: 70000: must be from 0 (default) to 65535"},
		{"udp buffer", "sources:\n  - udp:\n      addr: 127.0.0.1:0\n      read_buffer: -1\n", "node.yaml:4: sources[0].udp.read_buffer: -1: must not be negative"},
		{"file offset", "sources:\n  - file:\n      path: /x\n      offset: -5\n", "node.yaml:4: sources[0].file.offset: -5 is negative"},
		{"jetstream password without user", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    password: p\n", "node.yaml:6: output.jetstream.password: set without user"},
		{"jetstream two kinds of credentials", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    user: u\n    token: t\n", "node.yaml:4: output.jetstream: user and password, token: set one kind of credentials at most"},
		{"jetstream password twice", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    user: u\n    password: p\n    password_env: HOME\n", "node.yaml:4: output.jetstream: password, password_file and password_env: set at most one"},
		{"jetstream password from nowhere", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    user: u\n    password_env: SLUICE_TEST_NO_SUCH_VARIABLE\n", "node.yaml:7: output.jetstream.password_env: $SLUICE_TEST_NO_SUCH_VARIABLE is not set or empty"},
		{"jetstream tls version", "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    subject: x\n    tls: {min_version: \"1.0\"}\n", "node.yaml:6: output.jetstream.tls.min_version: \"1.0\": must be 1.2 or 1.3"},
		{"one port twice", "sources:\n  - tcp: {listen: 127.0.0.1:9400}\n  - tcp: {listen: \":9400\"}\n", "node.yaml:3: sources[1].tcp.listen: :9400: sources[0] binds it already"},
		{"one udp port twice", "sources:\n  - udp: {addr: 127.0.0.1:514}\n  - udp: {addr: 127.0.0.1:514}\n", "node.yaml:3: sources[1].udp.addr: 127.0.0.1:514: sources[0] binds it already"},
		{"one socket twice", "sources:\n  - unix: {listen: /tmp/s.sock}\n  - unix: {listen: /tmp/s.sock}\n", "node.yaml:3: sources[1].unix.listen: /tmp/s.sock: sources[0] binds it already"},
		{"syntax", "engine: [\n", "node.yaml:1: engine: YAML syntax: this [ or { is never closed (did not find expected node content)"},
		{"unclosed list", "engine:\n  buffers: [64\nsources:\n  - tcp: {listen: 127.0.0.1:0}\n", "node.yaml:2: engine.buffers: YAML syntax: this [ or { is never closed (did not find expected ',' or ']')"},
		{"unclosed mapping", "sources:\n  - tcp: {listen: 127.0.0.1:0\n  - udp: {addr: 127.0.0.1:0}\n", "node.yaml:2: sources[0].tcp: YAML syntax: this [ or { is never closed"},
		{"over-indented key", "engine:\n  buffers: 64\n    flush: 5ms\nsources:\n  - tcp: {listen: 127.0.0.1:0}\n", "node.yaml:3: engine.flush: YAML syntax: this line is indented under buffers, which has its value on line 2 already"},
		{"under-indented key", "engine:\n  buffers: 64\n flush: 5ms\n", "node.yaml:3: engine.flush: YAML syntax: indented 1 space where the rest of engine is indented 2"},
		{"tab indentation", "engine:\n  buffers: 64\n\tflush: 5ms\n", "node.yaml:3: engine.flush: YAML syntax: a tab in the indentation: YAML indents with spaces"},
		{"list item among keys", "engine:\n  flush: 5ms\n  - 3\n", "node.yaml:3: engine: YAML syntax: a list item among the keys of engine"},
		{"misaligned list item", "sources:\n  - tcp: {listen: 127.0.0.1:0}\n   - udp: {addr: 127.0.0.1:0}\n", "node.yaml:3: sources[0].udp: YAML syntax: indented 3 spaces"},
		{"unclosed quote", "sources:\n  - tcp:\n      listen: \"127.0.0.1:0\n", "node.yaml:3: sources[0].tcp.listen: YAML syntax: found unexpected end of stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(srcstest.WriteFile(t, dir, "node.yaml", tc.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), dir+"/"+tc.want) {
				t.Fatalf("error\n\t%v\nwant it to begin\n\t%s", err, dir+"/"+tc.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("%T is not a *ConfigError", err)
			}
			// No Go names: a type (engine.Config, time.Duration), an
			// exported field (QueueHigh), a package prefix.
			if m := regexp.MustCompile(`\b[a-z]+\.[A-Z]\w+|\b[A-Z][a-z]+[A-Z]\w*|^(srcs|engine|yaml|bench|node): `).FindString(ce.Msg); m != "" {
				t.Errorf("error %q speaks Go: %q", err, m)
			}
		})
	}
}

func TestEmptyFileIsErrEmpty(t *testing.T) {
	_, err := Load(srcstest.WriteFile(t, t.TempDir(), "node.yaml", "\n\n"))
	if !errors.Is(err, ErrEmpty) {
		t.Fatalf("%v is not ErrEmpty", err)
	}
}

// TestResolvedMasksSecrets: check prints the configuration without
// passwords, tokens or the credentials of URLs, each as [redacted].
func TestResolvedMasksSecrets(t *testing.T) {
	const tcp = "sources:\n  - tcp: {listen: 127.0.0.1:0}\n"
	for _, tc := range []struct {
		name, yaml string
		secrets    []string // must not appear
		want       []string // must appear
	}{
		{"mqtt password", "sources:\n  - mqtt:\n      broker: 127.0.0.1:1883\n      client_id: x\n      username: u\n      password: hunter2\n      topics: [a]\n",
			[]string{"hunter2"}, []string{"password: '[redacted]'", "username: u", "buf_size: 65536"}},
		{"url with a password", tcp + "output:\n  jetstream:\n    subject: x\n    url: nats://op:urlpw-17@127.0.0.1:1\n",
			[]string{"urlpw-17", "op:"}, []string{"url: nats://[redacted]@127.0.0.1:1"}},
		{"url with a token", tcp + "output:\n  jetstream:\n    subject: x\n    url: nats://s3cr3t-tok@127.0.0.1:1, nats://u:p4ss@127.0.0.2:2\n",
			[]string{"s3cr3t-tok", "p4ss"}, []string{"nats://[redacted]@127.0.0.1:1, nats://[redacted]@127.0.0.2:2"}},
		{"inline token", tcp + "output:\n  jetstream:\n    subject: x\n    token: tok-99\n",
			[]string{"tok-99"}, []string{"token: '[redacted]'"}},
		{"where a secret is is not a secret", tcp + "output:\n  jetstream:\n    subject: x\n    user: u\n    password_env: NATS_PW\n",
			[]string{"pw-from-env"}, []string{"password_env: NATS_PW"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NATS_PW", "pw-from-env")
			cfg, err := Parse("node.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			out, err := cfg.Resolved()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.secrets {
				if strings.Contains(string(out), s) {
					t.Errorf("resolved shows %q:\n%s", s, out)
				}
			}
			for _, s := range tc.want {
				if !strings.Contains(string(out), s) {
					t.Errorf("resolved lacks %q:\n%s", s, out)
				}
			}
			if strings.Contains(string(out), "(hidden)") {
				t.Errorf("resolved says (hidden), not [redacted]:\n%s", out)
			}
		})
	}
}

// TestRedactURLs: errors and log lines lose the credentials of URLs.
func TestRedactURLs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"jetstream: connect nats://op:urlpw@127.0.0.1:1: refused", "jetstream: connect nats://[redacted]@127.0.0.1:1: refused"},
		{"connect nats://op:xxxxx@h:1,nats://tok@h:2", "connect nats://[redacted]@h:1,nats://[redacted]@h:2"},
		{"mail op@example.org and nats://h:1", "mail op@example.org and nats://h:1"},
		{"GET https://h/x?user=u&token=abc123&n=1", "GET https://h/x?user=u&token=[redacted]&n=1"},
		{"header Authorization: Bearer abc.def refused", "header Authorization: Bearer [redacted] refused"},
		{`{"authorization":"Basic dXNlcjpwdw=="}`, `{"authorization":"Basic [redacted]"}`},
		{"proxy-authorization=s3cr3t", "proxy-authorization=[redacted]"},
	} {
		if got := redactSecrets(tc.in); got != tc.want {
			t.Errorf("redactSecrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var b strings.Builder
	log, err := newLogger(Log{Format: "json"}, &b)
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("jetstream", "err", errors.New("nats: dial nats://op:pw-55@127.0.0.1:1"), "url", "nats://op:pw-55@127.0.0.1:1")
	if strings.Contains(b.String(), "pw-55") || !strings.Contains(b.String(), "[redacted]@127.0.0.1:1") {
		t.Errorf("log line %s", b.String())
	}
}

// TestByteUnits: byte counts take sizes with units as people write them,
// plain or quoted, in block or flow mappings, several on one line, and a
// later error still names its own line.
func TestByteUnits(t *testing.T) {
	cfg, err := Parse("node.yaml", []byte("engine:\n  buf_size: 64KiB # one buffer\n  buffers: 16\n  max_pool_bytes: '1 MiB'\n"+
		"sources:\n  - tcp: {listen: 127.0.0.1:0, recv_buffer: 256KiB}\n  - udp:\n      addr: 127.0.0.1:0\n      read_buffer: \"4MB\"\n      max_datagram: 1500\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Engine
	if e.BufSize != 64<<10 || e.MaxPoolBytes != 1<<20 {
		t.Errorf("engine: buf_size %d, max_pool_bytes %d", e.BufSize, e.MaxPoolBytes)
	}
	if got := cfg.Sources[0].TCP.RecvBuffer; got != 256<<10 {
		t.Errorf("tcp recv_buffer %d", got)
	}
	if got := cfg.Sources[1].UDP; got.ReadBuffer != 4_000_000 || got.MaxDatagram != 1500 {
		t.Errorf("udp read_buffer %d, max_datagram %d", got.ReadBuffer, got.MaxDatagram)
	}
	// Several sizes on one line, the first rewritten longer than it was
	// written: each is found where the file has it.
	cfg, err = Parse("node.yaml", []byte("engine: {max_pool_bytes: 64MiB, buf_size: 64KiB}\n"+
		"sources:\n  - tcp: {listen: 127.0.0.1:0}\n    rate_limit: {bytes_per_second: 1MiB, burst: 256KiB}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e, rl := cfg.Engine, cfg.Sources[0].RateLimit; e.MaxPoolBytes != 64<<20 || e.BufSize != 64<<10 || rl.BytesPerSecond != 1<<20 || rl.Burst != 256<<10 {
		t.Errorf("sizes on one line: max_pool_bytes %d, buf_size %d, bytes_per_second %d, burst %d", e.MaxPoolBytes, e.BufSize, rl.BytesPerSecond, rl.Burst)
	}
	_, err = Parse("node.yaml", []byte("engine:\n  buf_size: 64KiB\n  bufers: 16\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "node.yaml:3: engine.bufers: unknown key") {
		t.Errorf("an unknown key after a size: %v", err)
	}
}

// TestBareZeroDuration: a duration given as a bare 0 is zero, as 0s is,
// in block and flow mappings, at every depth; the reference writes the
// defaults that way ("Default 0: never").
func TestBareZeroDuration(t *testing.T) {
	zero := "engine: {flush: 0, batch_wait: 0}\ndrain_timeout: 0\nlog: {status: 0}\n" +
		"sources:\n  - tcp: {listen: 127.0.0.1:0, handshake_timeout: 0}\n    idle_timeout: 0\n    flush: 0\n" +
		"  - tcp_client:\n      addr: 127.0.0.1:1\n      dial_timeout: 0\n      backoff: {initial: 0, max: 0}\n"
	cfg, err := Parse("node.yaml", []byte(zero))
	if err != nil {
		t.Fatal(err)
	}
	same, err := Parse("node.yaml", []byte(strings.ReplaceAll(zero, ": 0", ": 0s")))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := cfg.Resolved()
	b, _ := same.Resolved()
	if string(a) != string(b) {
		t.Errorf("0 and 0s resolve differently:\n%s\n---\n%s", a, b)
	}
	if s := cfg.Sources[0]; s.IdleTimeout != 0 || s.Flush != 0 {
		t.Errorf("idle_timeout %v, flush %v", s.IdleTimeout, s.Flush)
	}
}

// TestResolvedDefaults: check prints every default the node runs with,
// not the zero the file left.
func TestResolvedDefaults(t *testing.T) {
	cfg, err := Parse("node.yaml", []byte("engine: {buffers: 64}\n"+
		"sources:\n  - tcp: {listen: 127.0.0.1:0}\n    rate_limit: {bytes_per_second: 1MiB}\n    idle_timeout: 5m\n  - mqtt: {broker: 127.0.0.1:1883, client_id: x, topics: [a]}\n"+
		"  - tcp_client: {addr: 127.0.0.1:1}\n  - udp: {addr: 127.0.0.1:0}\n  - tail: {path: /var/log/x.log}\n"+
		"output:\n  jetstream: {subject: x, stream: S}\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := cfg.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"max_per_source: 16\n", "max_pool_bytes: 4294967296\n",
		"handshake_timeout: 10s\n", "max_handshakes: 1024\n",
		"version: 4\n", "keep_alive: 30s\n", "max_message: 1048576\n", "dial_timeout: 5s\n",
		"initial: 50ms\n", "max: 5s\n", "max_datagram: 65507\n", "poll: 250ms\n", "checkpoint_every: 1s\n",
		"url: nats://127.0.0.1:4222\n", "max_pending: 4096\n", "mqtt_subject: x.{topic}\n", "records: each\n", "ack_timeout: 5s\n", "retry_wait: 100ms\n",
		"storage: file\n", "replicas: 1\n", "duplicate_window: 2m0s\n",
		"bytes_per_second: 1048576\n", "burst: 65536\n", "idle_timeout: 5m0s\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("resolved lacks %q", strings.TrimSpace(want))
		}
	}
	for _, zero := range []string{"max_per_source: 0\n", "handshake_timeout: 0s\n", "max_handshakes: 0\n", "keep_alive: 0s\n",
		"version: 0\n", "max_message: 0\n", "ack_timeout: 0s\n", "max_pending: 0\n", "dial_timeout: 0s\n"} {
		if strings.Contains(string(out), zero) {
			t.Errorf("resolved still prints %q:\n%s", strings.TrimSpace(zero), out)
		}
	}
	if cfg.Sources[0].TCP.HandshakeTimeout != 0 || cfg.Output.JetStream.MaxPending != 0 {
		t.Error("Resolved changed the configuration it was called on")
	}
}

// TestPreflightWarnings: check warns of what run would refuse that
// depends on the machine or the command line: a listener's or a client's
// certificate or CA that does not load (which check does not refuse: the
// file may be on the machine that runs the node), an endpoint option
// without an endpoint.
func TestPreflightWarnings(t *testing.T) {
	dir := t.TempDir()
	notPEM := srcstest.WriteFile(t, dir, "cert.pem", "not a certificate\n")
	for _, tc := range []struct{ name, yaml, want string }{
		{"certificate", "sources:\n  - tcp:\n      listen: 127.0.0.1:0\n      tls: {cert_file: " + notPEM + ", key_file: " + notPEM + "}\n",
			"sources[0] (tcp 127.0.0.1:0): tls.cert_file " + notPEM + ", tls.key_file " + notPEM + ": "},
		{"a client's CA", "sources:\n  - tcp_client:\n      addr: 127.0.0.1:7000\n      tls: {ca_file: " + dir + "/missing-ca.pem}\n",
			"sources[0] (tcp_client 127.0.0.1:7000): tls.ca_file: open " + dir + "/missing-ca.pem: no such file or directory"},
		{"an MQTT client's certificate", "sources:\n  - mqtt:\n      broker: 127.0.0.1:8883\n      client_id: x\n      topics: [a]\n      tls: {cert_file: " + notPEM + ", key_file: " + notPEM + "}\n",
			"sources[0] (mqtt 127.0.0.1:8883): tls.cert_file " + notPEM + ", tls.key_file " + notPEM + ": "},
		{"pprof without an endpoint", "sources:\n  - tcp: {listen: 127.0.0.1:0}\nmetrics: {pprof: true}\n",
			"metrics.pprof: needs an endpoint: run refuses to start unless metrics.listen or --metrics gives one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("node.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if notes := strings.Join(Preflight(cfg), "\n"); !strings.Contains(notes, tc.want) {
				t.Fatalf("warnings\n%s\nwant %q", notes, tc.want)
			}
		})
	}
}

// TestDescribeErr: a source's error reads as what went wrong, once: no
// Go package prefixes, no layer repeating the source's name, no
// credentials.
func TestDescribeErr(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"dial refused", &srcs.SourceError{ID: 3, Name: "tcp://127.0.0.1:1", Op: "open",
			Err: fmt.Errorf("srcs: open tcp://127.0.0.1:1: %w", refused)}, "cannot connect to 127.0.0.1:1: connection refused"},
		{"name lookup", fmt.Errorf("srcs: open tcp://nowhere.invalid:1: %w",
			&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "nowhere.invalid", Err: "no such host"}}), "cannot resolve nowhere.invalid: no such host"},
		{"the source's name once", fmt.Errorf("srcs: mqtt mqtt://127.0.0.1:2: connack: %w", errors.New("not authorized")), "connack: not authorized"},
		{"credentials", errors.New("jetstream: connect nats://op:pw@127.0.0.1:1: refused"), "connect nats://[redacted]@127.0.0.1:1: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeErr(tc.err); got != tc.want {
				t.Fatalf("describeErr(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
