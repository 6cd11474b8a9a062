package node

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ConfigError is a problem with a node file, in the file's own terms: the
// file, the line (0 if none applies), the key path (sources[2].tcp.listen;
// empty for the file as a whole) and what is wrong. Its message reads
// like a compiler's, file:line: key: message, with no package prefix,
// because it is meant for the operator who wrote the file.
type ConfigError struct {
	File string
	Line int
	Key  string
	Msg  string
	Err  error // a sentinel such as ErrEmpty, if one applies
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		b.WriteString(": " + e.Key)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// errorf reports a problem at the key path, with its line.
func (f *file) errorf(path []any, format string, args ...any) error {
	return &ConfigError{File: f.name, Line: lineOf(f.root, path), Key: keyPath(path), Msg: fmt.Sprintf(format, args...)}
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

// yaml.v3's messages: "line 3: field bufers not found in type
// engine.Config" and "line 2: cannot unmarshal !!str `soon` into
// time.Duration". They name Go types; yamlError puts keys in their place.
var (
	reLine     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	reUnknown  = regexp.MustCompile("^field (\\S+) not found in type ")
	reUnmarsh  = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into ")
	reDupKey   = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
	reGoFieldP = regexp.MustCompile(`^([A-Z]\w*)((?:\.[A-Z]\w*)*)(\[\d+\])?(?::\s*|\s+)(.*)$`)
)

// yamlError turns a yaml.v3 error into a *ConfigError naming the key.
// A *yaml.TypeError holds several; the first is reported, the others
// counted.
func (f *file) yamlError(err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	ce := f.translate(msgs[0])
	if len(msgs) > 1 {
		ce.Msg += fmt.Sprintf(" (and %d more problems)", len(msgs)-1)
	}
	return ce
}

func (f *file) translate(msg string) *ConfigError {
	ce := &ConfigError{File: f.name, Msg: strings.TrimPrefix(msg, "yaml: ")}
	m := reLine.FindStringSubmatch(msg)
	if m == nil {
		return ce
	}
	ce.Line, _ = strconv.Atoi(m[1])
	rest := m[2]
	ce.Msg = rest
	if u := reUnknown.FindStringSubmatch(rest); u != nil {
		path := findKey(f.root, ce.Line, u[1])
		if path == nil {
			ce.Msg = fmt.Sprintf("%s: unknown key", u[1])
			return ce
		}
		ce.Key = keyPath(path)
		parent := typeAt(reflect.TypeFor[Config](), path[:len(path)-1])
		keys := yamlKeys(parent)
		ce.Msg = "unknown key"
		if s := closest(u[1], keys); s != "" {
			ce.Msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		if len(keys) > 0 {
			where := "here"
			if len(path) > 1 {
				where = keyPath(path[:len(path)-1])
			}
			ce.Msg += fmt.Sprintf("; %s takes %s", where, strings.Join(keys, ", "))
		}
		return ce
	}
	if u := reUnmarsh.FindStringSubmatch(rest); u != nil {
		tag, val := u[1], u[2]
		path := findValue(f.root, ce.Line, tag, val)
		var t reflect.Type
		if path != nil {
			ce.Key = keyPath(path)
			t = typeAt(reflect.TypeFor[Config](), path)
		}
		ce.Msg = describeWant(tag, val, t)
		return ce
	}
	if u := reDupKey.FindStringSubmatch(rest); u != nil {
		ce.Msg = fmt.Sprintf("key %s given twice (first at line %s)", u[1], u[2])
		return ce
	}
	ce.Msg = "YAML syntax: " + rest
	line, path, hint := syntaxLocation(f.data, ce.Line)
	if line > 0 {
		ce.Line = line
		ce.Msg = "YAML syntax: " + hint + " (" + rest + ")"
	}
	ce.Key = keyPath(path)
	return ce
}

// describeWant says what a value of the YAML kind tag (and text val) was
// given where a value of Go type t is wanted, in YAML words.
func describeWant(tag, val string, t reflect.Type) string {
	given := "a " + map[string]string{"map": "mapping", "seq": "list", "str": "string", "int": "number",
		"float": "number", "bool": "boolean", "null": "null", "timestamp": "timestamp"}[tag]
	if val != "" {
		given = strconv.Quote(val)
	}
	if t == nil {
		return given + " is not valid here"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Duration]() && (tag == "int" || tag == "float"):
		return given + " is not a duration (write it like 250ms, 5s or 1m30s: a number needs a unit, unless it is 0)"
	case t == reflect.TypeFor[time.Duration]():
		return given + " is not a duration (write it like 250ms, 5s or 1m30s)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return given + " is not a whole number"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr:
		return given + " is not a whole number from 0 up"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return given + " is not a number"
	case t.Kind() == reflect.Bool:
		return given + " must be true or false"
	case t.Kind() == reflect.String:
		return given + " must be a single value (a string)"
	case t.Kind() == reflect.Slice:
		return given + " must be a list"
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		if keys := yamlKeys(t); len(keys) > 0 {
			return given + " must be a mapping of keys (" + strings.Join(keys, ", ") + ")"
		}
		return given + " must be a mapping of keys"
	}
	return given + " is not valid here"
}

// findKey returns the path of the mapping key name on line.
func findKey(root *yaml.Node, line int, name string) []any {
	var found []any
	walk(root, nil, func(path []any, k, v *yaml.Node) bool {
		if k != nil && k.Line == line && k.Value == name {
			found = path
			return false
		}
		return true
	})
	return found
}

// findValue returns the path of the value on line of the YAML kind tag
// (and text val, for scalars).
func findValue(root *yaml.Node, line int, tag, val string) []any {
	var found []any
	walk(root, nil, func(path []any, k, v *yaml.Node) bool {
		if v.Line != line {
			return true
		}
		ok := false
		switch tag {
		case "map":
			ok = v.Kind == yaml.MappingNode
		case "seq":
			ok = v.Kind == yaml.SequenceNode
		default:
			ok = v.Kind == yaml.ScalarNode && (val == "" || v.Value == val)
		}
		if ok && len(path) > 0 {
			found = path
			return false
		}
		return true
	})
	return found
}

// walk calls fn for every node under n with its path, and for a mapping's
// values with their key; it stops when fn returns false.
func walk(n *yaml.Node, path []any, fn func(path []any, key, val *yaml.Node) bool) bool {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			if !walk(c, path, fn) {
				return false
			}
		}
		return true
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := append(clonePath(path), n.Content[i].Value)
			if !fn(p, n.Content[i], n.Content[i+1]) || !walk(n.Content[i+1], p, fn) {
				return false
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := append(clonePath(path), i)
			if !fn(p, nil, c) || !walk(c, p, fn) {
				return false
			}
		}
	}
	return true
}

func clonePath(p []any) []any { return append([]any(nil), p...) }

// yamlField is one key of a Go struct as YAML sees it.
type yamlField struct {
	key string
	sf  reflect.StructField
}

// yamlFields lists t's YAML keys, with inline structs' keys in their
// place and `yaml:"-"` fields left out.
func yamlFields(t reflect.Type) []yamlField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []yamlField
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || (!sf.IsExported() && !sf.Anonymous) {
			continue
		}
		if strings.Contains(opts, "inline") {
			out = append(out, yamlFields(sf.Type)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		out = append(out, yamlField{name, sf})
	}
	return out
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for _, f := range yamlFields(t) {
		keys = append(keys, f.key)
	}
	return keys
}

// typeAt returns the Go type at a key path under t, or nil.
func typeAt(t reflect.Type, path []any) reflect.Type {
	for _, k := range path {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil {
			return nil
		}
		switch k := k.(type) {
		case int:
			if t.Kind() != reflect.Slice {
				return nil
			}
			t = t.Elem()
		case string:
			var next reflect.Type
			for _, f := range yamlFields(t) {
				if f.key == k {
					next = f.sf.Type
				}
			}
			if next == nil && t.Kind() == reflect.Map {
				next = t.Elem()
			}
			t = next
		}
	}
	return t
}

// goToYAML returns the YAML key of t's Go field name, or name itself.
func goToYAML(t reflect.Type, name string) string {
	for _, f := range yamlFields(t) {
		if f.sf.Name == name {
			return f.key
		}
	}
	return name
}

// yamlizeWords replaces t's Go field names in a message by their keys:
// "must be below QueueHigh (9)" becomes "must be below queue_high (9)".
func yamlizeWords(t reflect.Type, msg string) string {
	for _, f := range yamlFields(t) {
		msg = regexp.MustCompile(`\b`+f.sf.Name+`\b`).ReplaceAllString(msg, f.key)
	}
	return msg
}

// sourceError turns a source constructor's error ("srcs: tcp client:
// Addr "x": missing host") into a key path under the source's entry and
// a message in YAML terms.
func sourceError(t reflect.Type, err error) ([]any, string) {
	msg := err.Error()
	for {
		// Strip "srcs: tail: " and "srcs: tail /path: " prefixes.
		rest, ok := strings.CutPrefix(msg, "srcs: ")
		if !ok {
			break
		}
		if i := strings.Index(rest, ": "); i >= 0 {
			msg = rest[i+2:]
		} else {
			msg = rest
		}
	}
	m := reGoFieldP.FindStringSubmatch(msg)
	if m == nil || t == nil {
		return nil, msg
	}
	var path []any
	cur := t
	for _, name := range append([]string{m[1]}, strings.Split(strings.TrimPrefix(m[2], "."), ".")...) {
		if name == "" {
			continue
		}
		var found *yamlField
		for _, f := range yamlFields(cur) {
			if f.sf.Name == name {
				found = &f
				break
			}
		}
		if found == nil {
			return nil, msg
		}
		path = append(path, found.key)
		cur = found.sf.Type
	}
	if m[3] != "" {
		i, _ := strconv.Atoi(strings.Trim(m[3], "[]"))
		path = append(path, i)
	}
	return path, yamlizeWords(t, m[4])
}

// closest returns the key nearest to name by edit distance, if it is
// near enough to be a typo.
func closest(name string, keys []string) string {
	best, bestD := "", 3
	for _, k := range keys {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
