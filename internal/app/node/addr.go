package node

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/engine/jetstream"
)

// maxUnixPath is the longest socket path bind(2) takes: sun_path holds
// 108 bytes with the terminating NUL.
const maxUnixPath = 107

// checkHostPort checks an address to listen on or dial as the node would
// use it: host:port, where the host may be empty (every address) and the
// port is a number from 0 to 65535 or a service name. It checks the form
// only; whether the host resolves is for run to find out.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		why := err.Error()
		if errors.As(err, &ae) {
			why = ae.Err
		}
		return fmt.Errorf("%q: %s (write host:port, like 127.0.0.1:5514, or :5514 for every address)", addr, why)
	}
	if strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("%q: %q is not a host name or an IP address", addr, host)
	}
	if port == "" {
		return fmt.Errorf("%q: no port (write host:port; port 0 picks a free one)", addr)
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Errorf("%q: port %d is out of range (0 to 65535)", addr, n)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: %q is not a port number or a known service", addr, port)
	}
	return nil
}

// checkUnixPath checks a socket path to listen on.
func checkUnixPath(path string) error {
	if len(path) > maxUnixPath {
		return fmt.Errorf("%d bytes: a unix socket path takes at most %d", len(path), maxUnixPath)
	}
	return nil
}

// checkServerURLs checks a NATS server list as the client parses it:
// comma-separated URLs (nats://, tls://, ws://, wss://; a bare host:port
// is nats://), each with a host and, if given, a port number. Messages
// never repeat a URL's credentials.
func checkServerURLs(list string) error {
	for i, raw := range strings.Split(list, ",") {
		s := strings.TrimSpace(raw)
		if s == "" {
			return fmt.Errorf("server %d of the list is empty", i+1)
		}
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("%s: not a URL", redactSecrets(s))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("%s: scheme %q is not nats, tls, ws or wss", redactSecrets(s), u.Scheme)
		}
		if u.Hostname() == "" {
			return fmt.Errorf("%s: no host", redactSecrets(s))
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("%s: port %q is not a number from 1 to 65535", redactSecrets(s), p)
			}
		}
	}
	return nil
}

// checkAddresses checks the addresses of source i, whose kind is kind:
// what to listen on, and a tcp listener's allow and trusted networks.
func (f *file) checkAddresses(i int, kind string, s Source) error {
	at := func(key ...any) []any { return append([]any{"sources", i, kind}, key...) }
	switch {
	case s.TCP != nil:
		if err := checkHostPort(s.TCP.Listen); err != nil {
			return f.errorf(at("listen"), "%v", err)
		}
		if err := s.TCP.CheckTrust(); err != nil {
			return f.errorf(at(trustKey(err.Error())...), "%s", trustMsg(err.Error()))
		}
		if t := s.TCP.TLS; t != nil {
			if key, msg := tlsForm(t, true); msg != "" {
				return f.errorf(at(key...), "%s", msg)
			}
		}
	case s.Unix != nil:
		if err := checkUnixPath(s.Unix.Listen); err != nil {
			return f.errorf(at("listen"), "%v", err)
		}
		if key, msg := unixListenerForm(s.Unix); msg != "" {
			return f.errorf(at(key...), "%s", msg)
		}
	case s.UDP != nil:
		if err := checkHostPort(s.UDP.Addr); err != nil {
			return f.errorf(at("addr"), "%v", err)
		}
		switch u := s.UDP; {
		case u.ReadBuffer < 0:
			return f.errorf(at("read_buffer"), "%d: must not be negative", u.ReadBuffer)
		case u.MaxDatagram < 0 || u.MaxDatagram > 65535:
			return f.errorf(at("max_datagram"), "%d: must be from 0 (default) to 65535", u.MaxDatagram)
		}
	}
	return nil
}

// reTrustKey matches the key path that begins a listener's trust error:
// "allow[1]: ...", "proxy_protocol.trusted[0]: ...", "max_handshakes: ...".
var reTrustKey = regexp.MustCompile(`^([a-z_]+(?:\.[a-z_]+)*)(?:\[(\d+)\])?: (.*)$`)

// trustKey returns the key path an error of CheckTrust begins with.
func trustKey(msg string) []any {
	m := reTrustKey.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	var path []any
	for _, k := range strings.Split(m[1], ".") {
		path = append(path, k)
	}
	if m[2] != "" {
		n, _ := strconv.Atoi(m[2])
		path = append(path, n)
	}
	return path
}

// trustMsg returns the message of an error of CheckTrust without its key.
func trustMsg(msg string) string {
	if m := reTrustKey.FindStringSubmatch(msg); m != nil {
		return m[3]
	}
	return msg
}

// checkJetStream checks the output's fields as the publisher would when
// it starts: its server URLs and its numbers.
func (f *file) checkJetStream(js *jetstream.Config) error {
	at := func(key string) []any { return []any{"output", "jetstream", key} }
	switch {
	case js.MaxPending < 0:
		return f.errorf(at("max_pending"), "%d: must not be negative", js.MaxPending)
	case js.AckTimeout < 0:
		return f.errorf(at("ack_timeout"), "%v: must not be negative", js.AckTimeout)
	case js.RetryWait < 0:
		return f.errorf(at("retry_wait"), "%v: must not be negative", js.RetryWait)
	case js.DuplicateWindow < 0:
		return f.errorf(at("duplicate_window"), "%v: must not be negative", js.DuplicateWindow)
	case js.Storage != "" && js.Storage != "file" && js.Storage != "memory":
		return f.errorf(at("storage"), "%q: must be file or memory", js.Storage)
	case js.Replicas < 0 || js.Replicas > 5:
		return f.errorf(at("replicas"), "%d: must be from 0 (default) to 5", js.Replicas)
	case js.Records != "" && js.Records != jetstream.RecordsEach && js.Records != jetstream.RecordsBatch:
		return f.errorf(at("records"), "%q: must be each or batch", js.Records)
	}
	if _, err := jetstream.ParseTemplate(js.MQTTSubject); js.MQTTSubject != "" && err != nil {
		return f.errorf(at("mqtt_subject"), "%v", err)
	}
	if js.TLS != nil {
		if key, msg := tlsForm(js.TLS, false); msg != "" {
			return f.errorf(append([]any{"output", "jetstream"}, key...), "%s", msg)
		}
	}
	if key, msg := jetStreamCredentials(js); msg != "" {
		return f.errorf(append([]any{"output", "jetstream"}, key...), "%s", msg)
	}
	if js.URL != "" {
		if err := checkServerURLs(js.URL); err != nil {
			return f.errorf(at("url"), "%v", err)
		}
	}
	return nil
}

// checkSharedAddresses refuses two entries that would bind the same
// address, which run refuses when the second one cannot listen: tcp
// listeners on one port (unless both set reuse_port), udp sources on one
// port, unix listeners on one path. Port 0 picks a free port each time,
// and a host left empty, 0.0.0.0 or :: takes every address.
func (f *file) checkSharedAddresses() error {
	type bound struct {
		i          int
		kind, addr string
		reuse      bool
	}
	var seen []bound
	for i, s := range f.cfg.Sources {
		var b bound
		switch {
		case s.TCP != nil:
			b = bound{i, "tcp", s.TCP.Listen, s.TCP.ReusePort}
		case s.UDP != nil:
			b = bound{i, "udp", s.UDP.Addr, false}
		case s.Unix != nil:
			b = bound{i, "unix", s.Unix.Listen, false}
		default:
			continue
		}
		for _, o := range seen {
			if o.kind != b.kind || (b.reuse && o.reuse) || !sameBind(b.kind, o.addr, b.addr) {
				continue
			}
			key := "listen"
			if b.kind == "udp" {
				key = "addr"
			}
			return f.errorf([]any{"sources", i, b.kind, key}, "%s: sources[%d] binds it already", b.addr, o.i)
		}
		seen = append(seen, b)
	}
	return nil
}

// sameBind says whether two addresses of kind would bind the same.
func sameBind(kind, a, b string) bool {
	if kind == "unix" {
		return a == b
	}
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wildcard(ha) || wildcard(hb)
}
