package node

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite examples/node-reference.md from the code")

const referencePath = "../../../examples/node-reference.md"

// TestReference checks that examples/node-reference.md lists every key of
// a node file as the code defines it: the keys and types from the Go
// types' YAML tags, the meaning from their doc comments. -update writes
// it.
func TestReference(t *testing.T) {
	got := reference(t)
	if *update {
		if err := os.WriteFile(referencePath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Fatalf("%s is out of date: run go test ./internal/app/node -run TestReference -update", referencePath)
	}
}

// fieldDocs maps "pkgpath.Type.Field" to the field's doc comment, for the
// packages whose types a node file holds.
func fieldDocs(t *testing.T) map[string]string {
	docs := map[string]string{}
	for pkg, dir := range map[string]string{
		"github.com/sluice-io/sluice/internal/app/node": ".",
		"github.com/sluice-io/sluice/engine":            "../../../engine",
		"github.com/sluice-io/sluice/engine/jetstream":  "../../../engine/jetstream",
		"github.com/sluice-io/sluice/srcs":              "../../../srcs",
		"github.com/sluice-io/sluice/srcs/mqtt":         "../../../srcs/mqtt",
	} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				prev := ""
				for _, fl := range st.Fields.List {
					doc := ""
					switch {
					case fl.Doc != nil:
						doc = fl.Doc.Text()
					case fl.Comment != nil:
						doc = fl.Comment.Text()
					case prev != "" && len(fl.Names) > 0:
						doc = "See " + prev + "."
					}
					doc = strings.Join(strings.Fields(doc), " ")
					for _, name := range fl.Names {
						docs[pkg+"."+ts.Name.Name+"."+name.Name] = doc
						prev = name.Name
					}
				}
				return true
			})
		}
	}
	return docs
}

func reference(t *testing.T) string {
	var b strings.Builder
	b.WriteString(`# Node file reference

Every key of a node file (` + "`sluice run -c FILE`" + `), generated from the
code by ` + "`go test ./internal/app/node -run TestReference -update`" + `; the
test fails when this file and the code disagree. Keys are spelled with
their path: ` + "`sources[].tcp.listen`" + ` is ` + "`listen`" + ` under ` + "`tcp:`" + ` in an entry
of the ` + "`sources:`" + ` list. A zero or missing value takes the default the
meaning names. Durations are written like ` + "`250ms`, `5s`, `1m30s`" + `;
sizes (` + sizeKeys() + `) are a number of bytes or a size with a
unit: ` + "`65536`, `64KiB`, `1 MiB`, `256KB`" + ` (KiB, MiB, GiB are powers of
1024; KB, MB, GB of 1000). The meanings are the Go documentation
of the fields, with field names turned into keys. See
[node.yaml](node.yaml) for a commented example.

| key | type | meaning |
|---|---|---|
`)
	docs := fieldDocs(t)
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		for _, f := range yamlFields(typ) {
			key := prefix + f.key
			owner := ownerOf(typ, f.sf.Name)
			doc := docs[owner.PkgPath()+"."+owner.Name()+"."+f.sf.Name]
			doc = docWords(owner, f.sf.Name, f.key, doc)
			ft := f.sf.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			tn := typeName(ft)
			if byteKeys[f.key] && tn == "integer" {
				tn = "size"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", key, tn, strings.ReplaceAll(doc, "|", "\\|"))
			switch {
			case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]():
				walk(key+".", ft)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				walk(key+"[].", ft.Elem())
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	return b.String()
}

// ownerOf returns the struct type that declares field name, looking into
// inline (embedded) structs.
func ownerOf(t reflect.Type, name string) reflect.Type {
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Name == name && !sf.Anonymous {
			return t
		}
		if sf.Anonymous {
			if _, ok := sf.Type.FieldByName(name); ok {
				return ownerOf(sf.Type, name)
			}
		}
	}
	return t
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case t.Kind() == reflect.Bool:
		return "bool"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case t.Kind() == reflect.Struct:
		return "mapping"
	}
	return t.Kind().String()
}

// docWords puts keys for Go field names in a field's doc: the field's own
// name where it begins the doc, and elsewhere the names that cannot be
// plain words (BufSize, QueueHigh).
func docWords(owner reflect.Type, name, key, doc string) string {
	for _, sep := range []string{" ", ","} {
		if rest, ok := strings.CutPrefix(doc, name+sep); ok {
			doc = "`" + key + "`" + sep + rest
		}
	}
	for _, f := range yamlFields(owner) {
		if f.sf.Name != name && regexp.MustCompile(`^[A-Z][a-z0-9]+[A-Z]`).MatchString(f.sf.Name) {
			doc = regexp.MustCompile(`\b`+f.sf.Name+`\b`).ReplaceAllString(doc, "`"+f.key+"`")
		}
	}
	return doc
}

// sizeKeys lists the keys that take sizes with units, as the reference
// names them.
func sizeKeys() string {
	var keys []string
	for k := range byteKeys {
		keys = append(keys, "`"+k+"`")
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}
