package srcs

import (
	"fmt"
	"os"
	"strings"
)

// Redacted is how a Secret prints.
const Redacted = "[redacted]"

// Secret is a password, token or key read from configuration. It prints
// as Redacted, with fmt's verbs and when marshaled to YAML or JSON, so a
// configuration printed or logged never shows it; Reveal gives the value
// to the code that sends it. An empty Secret prints as "".
type Secret string

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// GoString keeps %#v from showing the value.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// MarshalYAML prints the secret redacted (gopkg.in/yaml.v3's Marshaler).
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON prints the secret redacted.
func (s Secret) MarshalJSON() ([]byte, error) { return fmt.Appendf(nil, "%q", s.String()), nil }

// LoadSecret resolves a secret given in one of three ways, the YAML keys
// key, key_file and key_env: inline, from a file (its content, with
// trailing white space trimmed, so a file written by echo works), or from
// the environment variable env names. At most one may be set; none gives
// "". Errors name the keys, never the value.
func LoadSecret(key string, inline Secret, file, env string) (Secret, error) {
	set := 0
	for _, v := range []string{string(inline), file, env} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return "", fmt.Errorf("%s, %s_file and %s_env: set at most one", key, key, key)
	}
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_file: %w", key, err)
		}
		v := strings.TrimRight(string(b), " \t\r\n")
		if v == "" {
			return "", fmt.Errorf("%s_file: %s is empty", key, file)
		}
		return Secret(v), nil
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return "", fmt.Errorf("%s_env: $%s is not set or empty", key, env)
		}
		return Secret(v), nil
	}
	return inline, nil
}
