package node

import (
	"log/slog"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/srcs"
)

// Redacted is the one word the node prints in place of a secret: in
// `sluice check`, in its log and in its errors. It is srcs.Redacted, as
// a srcs.Secret prints.
const Redacted = srcs.Redacted

// reUserinfo matches the credentials of a URL: the userinfo between
// scheme:// and @ (nats://user:password@host, nats://token@host), also
// when a library has already masked its password (user:xxxxx@).
var reUserinfo = regexp.MustCompile(`\b([a-zA-Z][a-zA-Z0-9+.\-]*://)[^\s/?#@,"']+@`)

// reAuthHeader matches the value of an Authorization header as an error
// or a dump may quote it (Authorization: Bearer abc, "authorization":"Basic
// abc").
var reAuthHeader = regexp.MustCompile(`(?i)((?:proxy-)?authorization["']?\s*[:=]\s*["']?)(?:(basic|bearer|token|nkey|jwt)\s+)?[^\s"',;]+`)

// reQuerySecret matches a secret passed in a URL's query (?token=abc,
// &password=abc).
var reQuerySecret = regexp.MustCompile(`(?i)([?&](?:token|access_token|auth_token|password|pass|secret|key|jwt)=)[^&\s"']+`)

// redactSecrets replaces the credentials in s by Redacted: the userinfo of
// URLs, secrets in URL queries, and the values of Authorization headers.
func redactSecrets(s string) string {
	if strings.Contains(s, "@") {
		s = reUserinfo.ReplaceAllString(s, "${1}"+Redacted+"@")
	}
	if strings.Contains(s, "=") {
		s = reQuerySecret.ReplaceAllString(s, "${1}"+Redacted)
	}
	if strings.Contains(strings.ToLower(s), "authorization") {
		s = reAuthHeader.ReplaceAllStringFunc(s, func(m string) string {
			sub := reAuthHeader.FindStringSubmatch(m)
			if sub[2] != "" {
				return sub[1] + sub[2] + " " + Redacted
			}
			return sub[1] + Redacted
		})
	}
	return s
}

// rewordedError is an error whose message the node reworded (secrets
// redacted, layers said once); it unwraps to the original for errors.Is
// and As.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

// operatorError returns err as the node reports it to the operator: the
// credentials in its message redacted, without the Go package prefixes
// of the layers it passed (node: srcs: ...), and each layer's words said
// once (listen tcp: listen tcp 127.0.0.1:80 becomes listen tcp
// 127.0.0.1:80). It unwraps to err.
func operatorError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if r := operatorWords(redactSecrets(msg)); r != msg {
		return &rewordedError{r, err}
	}
	return err
}

// goPackages are the prefixes the node's layers put on their errors.
var goPackages = map[string]bool{"node": true, "srcs": true, "engine": true, "jetstream": true, "fallback": true, "ring": true}

func operatorWords(msg string) string {
	segs := strings.Split(msg, ": ")
	out := segs[:0]
	for i, s := range segs {
		if goPackages[s] && i < len(segs)-1 {
			continue
		}
		if i+1 < len(segs) && s != "" && strings.HasPrefix(segs[i+1], s) {
			continue
		}
		out = append(out, s)
	}
	return strings.Join(out, ": ")
}

// redactAttr is the log handlers' ReplaceAttr for secrets: strings and
// errors lose the credentials they quote.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value.Any().(type) {
	case string:
		if r := redactSecrets(v); r != v {
			a.Value = slog.StringValue(r)
		}
	case error:
		if r := redactSecrets(v.Error()); r != v.Error() {
			a.Value = slog.StringValue(r)
		}
	}
	return a
}

// secretKeys are the words of keys whose values are secrets. A key that
// ends in _file or _env names where a secret is, not the secret, and
// prints as it is.
var secretKeys = []string{"password", "token", "secret", "nkey", "creds", "credentials", "authorization"}

// maskSecrets replaces the values of keys that hold secrets, and the
// credentials of URLs in any value, by Redacted.
func maskSecrets(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := strings.ToLower(n.Content[i].Value), n.Content[i+1]
			if strings.HasSuffix(k, "_file") || strings.HasSuffix(k, "_env") || v.Kind != yaml.ScalarNode || v.Value == "" {
				continue
			}
			for _, s := range secretKeys {
				if strings.Contains(k, s) {
					v.Value, v.Tag, v.Style = Redacted, "!!str", 0
					break
				}
			}
		}
	}
	if n.Kind == yaml.ScalarNode {
		n.Value = redactSecrets(n.Value)
	}
	for _, c := range n.Content {
		maskSecrets(c)
	}
}
