package node

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
)

// Checks of fields whose form the sources or the output check only when
// they open, made here so that check refuses what run would. Each returns
// the key path under the entry at fault and what is wrong.

// unixListenerForm refuses the listener keys a unix listener cannot use.
func unixListenerForm(l *Listener) ([]any, string) {
	switch {
	case l.TLS != nil:
		return []any{"tls"}, "applies to tcp listeners only"
	case l.ProxyProtocol != nil:
		return []any{"proxy_protocol"}, "applies to tcp listeners only"
	case len(l.Allow) > 0:
		return []any{"allow"}, "applies to tcp listeners only"
	}
	return nil, ""
}

// tlsForm checks a tls section without reading its files: for a listener
// (which serves a certificate and may verify its clients') or a client.
func tlsForm(t *srcs.TLSConfig, listener bool) ([]any, string) {
	at := func(key string) []any { return []any{"tls", key} }
	switch t.MinVersion {
	case "", "1.2", "1.3":
	default:
		return at("min_version"), fmt.Sprintf("%q: must be 1.2 or 1.3", t.MinVersion)
	}
	if !listener {
		switch {
		case t.ClientAuth != "":
			return at("client_auth"), "applies to listeners, not clients"
		case (t.CertFile == "") != (t.KeyFile == ""):
			return []any{"tls"}, "cert_file and key_file go together"
		}
		return nil, ""
	}
	switch {
	case t.CertFile == "":
		return at("cert_file"), "required on a listener (with key_file)"
	case t.KeyFile == "":
		return at("key_file"), "required on a listener (with cert_file)"
	case t.ServerName != "":
		return at("server_name"), "applies to clients, not listeners"
	case t.InsecureSkipVerify:
		return at("insecure_skip_verify"), "applies to clients, not listeners"
	case !slices.Contains([]string{"", srcs.ClientAuthNone, srcs.ClientAuthRequire, srcs.ClientAuthVerifyIfGiven}, t.ClientAuth):
		return at("client_auth"), fmt.Sprintf("%q: must be none, require or verify_if_given", t.ClientAuth)
	case (t.ClientAuth == "" || t.ClientAuth == srcs.ClientAuthNone) && t.CAFile != "":
		return at("ca_file"), "set without client_auth (require or verify_if_given)"
	case t.ClientAuth != "" && t.ClientAuth != srcs.ClientAuthNone && t.CAFile == "":
		return at("ca_file"), "required with client_auth " + t.ClientAuth
	}
	return nil, ""
}

// jetStreamCredentials checks the output's credentials as the publisher
// does when it connects: each secret given one way at most (and there),
// a password only with a user, and one kind of credentials at most.
func jetStreamCredentials(js *jetstream.Config) ([]any, string) {
	pw, err := srcs.LoadSecret("password", js.Password, js.PasswordFile, js.PasswordEnv)
	if err != nil {
		return secretKey(err)
	}
	tok, err := srcs.LoadSecret("token", js.Token, js.TokenFile, js.TokenEnv)
	if err != nil {
		return secretKey(err)
	}
	if pw != "" && js.User == "" {
		return []any{"password"}, "set without user"
	}
	var kinds []string
	for _, k := range []struct {
		set  bool
		name string
	}{{js.User != "", "user and password"}, {tok != "", "token"}, {js.NKeySeedFile != "", "nkey_seed_file"}, {js.CredsFile != "", "creds_file"}} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	if len(kinds) > 1 {
		return nil, fmt.Sprintf("%s: set one kind of credentials at most", strings.Join(kinds, ", "))
	}
	return nil, ""
}

// secretKey splits a srcs.LoadSecret error into the key it begins with
// (password_env: ...) and the rest; the key is nil when it names several.
func secretKey(err error) ([]any, string) {
	k, rest, ok := strings.Cut(err.Error(), ": ")
	if !ok || strings.ContainsAny(k, ", ") {
		return nil, err.Error()
	}
	return []any{k}, rest
}
