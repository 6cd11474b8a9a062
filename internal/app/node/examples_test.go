package node

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestDocExamples: every node-file example in docs/ and examples/ passes
// check (Parse, then Resolved) as written, and again rewritten in block
// style and in flow style, where every mapping and list sits on one line
// with its neighbours. The examples are the node files of examples/, the
// yaml blocks of the pages, and the mappings the pages write inline
// (`rate_limit: {bytes_per_second: 1MiB, burst: 256KiB}`), each placed
// where its key belongs in a node file. A block or inline example that
// lacks sources: gets one, so that a fragment is checked as a whole file.
func TestDocExamples(t *testing.T) {
	var examples []docExample
	files, _ := filepath.Glob("../../../examples/*.yaml")
	pages, _ := filepath.Glob("../../../docs/*.md")
	pages = append(pages, "../../../README.md")
	more, _ := filepath.Glob("../../../examples/*.md")
	pages = append(pages, more...)
	if len(files) == 0 || len(more) == 0 || len(pages) < 3 {
		t.Fatalf("found %d node files, %d pages: the test looks for them from the wrong place", len(files), len(pages))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(filepath.Base(f), "web-config") {
			continue // a Prometheus web configuration, not a node file
		}
		examples = append(examples, docExample{where: rel(f), yaml: string(b)})
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, pageExamples(t, rel(p), string(b))...)
	}
	if len(examples) < 5 {
		t.Fatalf("found %d examples: the search is broken", len(examples))
	}
	for _, ex := range examples {
		root := &yaml.Node{}
		if err := yaml.Unmarshal([]byte(ex.yaml), root); err != nil {
			t.Errorf("%s: not YAML: %v\n%s", ex.where, err, ex.yaml)
			continue
		}
		completed := completeNodeFile(root)
		whole := ex.whole && !completed
		written := ex.yaml
		for from, to := range machineFiles(t, root) {
			written = strings.ReplaceAll(written, from, to)
		}
		for _, style := range []struct {
			name  string
			style yaml.Style
		}{{"as written", 0}, {"block", 0}, {"flow", yaml.FlowStyle}} {
			var text string
			switch {
			case style.name == "as written" && !whole:
				continue // a fragment: checked once completed, below
			case style.name == "as written":
				text = written
			default:
				restyle(root, style.style)
				b, err := yaml.Marshal(root)
				if err != nil {
					t.Fatalf("%s: %v", ex.where, err)
				}
				text = string(b)
			}
			cfg, err := Parse("node.yaml", []byte(text))
			if err == nil {
				_, err = cfg.Resolved()
			}
			if err != nil {
				t.Errorf("%s, %s: check refuses it: %v\n%s", ex.where, style.name, err, text)
			}
		}
	}
}

// docExample is one example: where it is, and its YAML. whole says it is
// a node file as written (checked as is before it is restyled).
type docExample struct {
	where string
	yaml  string
	whole bool
}

func rel(p string) string { return strings.TrimPrefix(filepath.ToSlash(p), "../../../") }

var (
	yamlBlock = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")
	// inlineMapping is an inline code span holding a key and a flow
	// mapping, possibly broken over two lines of the page.
	inlineMapping = regexp.MustCompile("`([a-z_]+):\\s+(\\{[^`]*\\})`")
	placeholder   = regexp.MustCompile(`\b[A-Z]+\b`)
)

// pageExamples returns the examples on a page.
func pageExamples(t *testing.T, page, text string) []docExample {
	var out []docExample
	for _, m := range yamlBlock.FindAllStringSubmatchIndex(text, -1) {
		line := strings.Count(text[:m[0]], "\n") + 1
		out = append(out, docExample{where: page + ":" + strconv.Itoa(line), yaml: text[m[2]:m[3]], whole: true})
	}
	for _, m := range inlineMapping.FindAllStringSubmatchIndex(text, -1) {
		line := strings.Count(text[:m[0]], "\n") + 1
		key, value := text[m[2]:m[3]], strings.Join(strings.Fields(text[m[4]:m[5]]), " ")
		where := page + ":" + strconv.Itoa(line)
		if placeholder.MatchString(value) {
			continue // a pattern such as {attempts: N}, not a value
		}
		switch {
		case hasKey(reflect.TypeFor[Config](), key):
			out = append(out, docExample{where: where, yaml: key + ": " + value + "\n"})
		case hasKey(reflect.TypeFor[Source](), key):
			out = append(out, docExample{where: where, yaml: "sources:\n  - tcp: {listen: 127.0.0.1:0}\n    " + key + ": " + value + "\n"})
		default:
			t.Errorf("%s: `%s: %s`: the test does not know where %s goes in a node file", where, key, value, key)
		}
	}
	return out
}

func hasKey(t reflect.Type, key string) bool {
	for _, f := range yamlFields(t) {
		if f.key == key {
			return true
		}
	}
	return false
}

// completeNodeFile adds a source to a document that has none, and says
// whether it did.
func completeNodeFile(doc *yaml.Node) bool {
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "sources" {
			return false
		}
	}
	var src yaml.Node
	if err := yaml.Unmarshal([]byte("sources:\n  - tcp: {listen: 127.0.0.1:0}\n"), &src); err != nil {
		panic(err)
	}
	m.Content = append(m.Content, src.Content[0].Content...)
	return true
}

// restyle sets every mapping and list under n to style, and drops the
// comments, which a flow style cannot keep in place.
func restyle(n *yaml.Node, style yaml.Style) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = style
	}
	for _, c := range n.Content {
		restyle(c, style)
	}
}

// secretFileKey matches the keys whose files check reads: the secrets.
var secretFileKey = regexp.MustCompile(`^(password|token|nkey_seed|creds)_file$`)

// machineFiles points the secret files an example names on the reader's
// machine (/run/secrets/...) at files of the test's, and returns what it
// changed. Certificates and the like are only looked at by check's
// warnings, not read.
func machineFiles(t *testing.T, n *yaml.Node) map[string]string {
	moved := map[string]string{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if secretFileKey.MatchString(k.Value) && v.Kind == yaml.ScalarNode {
					var to string
					if k.Value == "creds_file" {
						op := newOperator(t, "examples")
						acc, _ := op.account("examples", true)
						to = op.creds(t.TempDir(), filepath.Base(v.Value), acc, "node", time.Time{})
					} else {
						to = filepath.Join(t.TempDir(), filepath.Base(v.Value))
						if err := os.WriteFile(to, []byte("not-a-real-"+strings.TrimSuffix(k.Value, "_file")), 0o600); err != nil {
							t.Fatal(err)
						}
					}
					moved[v.Value] = to
					v.Value = to
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return moved
}
