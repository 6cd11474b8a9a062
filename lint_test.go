package sluice_test

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// modulePath is the module's import path (go.mod).
const modulePath = "github.com/sluice-io/sluice"

// goFile is one parsed Go file of the module, with its slash-separated path
// relative to the module root.
type goFile struct {
	path string
	ast  *ast.File
	fset *token.FileSet
}

// moduleFiles parses every Go file in the module (comments included),
// skipping testdata and hidden directories.
func moduleFiles(t *testing.T) []goFile {
	t.Helper()
	var files []goFile
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		files = append(files, goFile{path: filepath.ToSlash(path), ast: f, fset: fset})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("lint: no Go files found; run from the module root")
	}
	return files
}

// importName returns the name under which f imports path, or "" if it does not.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// selectorCalls reports every pkg.Name selector in f whose package is
// imported from importPath and whose name satisfies match.
func selectorCalls(gf goFile, importPath string, match func(string) bool) []string {
	name := importName(gf.ast, importPath)
	if name == "" || name == "_" {
		return nil
	}
	var hits []string
	ast.Inspect(gf.ast, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && match(sel.Sel.Name) {
			hits = append(hits, gf.fset.Position(sel.Pos()).String()+": "+name+"."+sel.Sel.Name)
		}
		return true
	})
	return hits
}

// unsafeAllowed says where unsafe may live: the kernel interface in ring/
// and internal/mmsg/ (recvmmsg, which x/sys lacks), and the slab
// allocator in pool/.
func unsafeAllowed(path string) bool {
	return strings.HasPrefix(path, "ring/") || strings.HasPrefix(path, "internal/mmsg/") || strings.HasPrefix(path, "pool/slab")
}

// rawSyscallFiles are the files that may make raw system calls: io_uring's
// in ring/, and recvmmsg's for the runners that read datagram sockets
// themselves.
var rawSyscallFiles = []string{"ring/sys_linux.go", "internal/mmsg/mmsg_linux.go"}

func TestLintUnsafeOnlyInRingAndSlab(t *testing.T) {
	for _, gf := range moduleFiles(t) {
		if importName(gf.ast, "unsafe") != "" && !unsafeAllowed(gf.path) {
			t.Errorf("%s imports unsafe; only ring/, internal/mmsg/ and pool/slab*.go may", gf.path)
		}
		for _, cg := range gf.ast.Comments {
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, "//go:linkname") {
					t.Errorf("%s: //go:linkname is not allowed", gf.fset.Position(c.Pos()))
				}
			}
		}
	}
}

func TestLintRawSyscallsOnlyInOneFile(t *testing.T) {
	raw := func(name string) bool {
		return strings.HasPrefix(name, "Syscall") || strings.HasPrefix(name, "RawSyscall")
	}
	for _, gf := range moduleFiles(t) {
		if slices.Contains(rawSyscallFiles, gf.path) {
			continue
		}
		for _, pkg := range []string{"syscall", "golang.org/x/sys/unix"} {
			for _, hit := range selectorCalls(gf, pkg, raw) {
				t.Errorf("%s: raw system calls belong in %s only", hit, strings.Join(rawSyscallFiles, " and "))
			}
		}
	}
}

func TestLintTypedAtomics(t *testing.T) {
	untyped := func(name string) bool {
		for _, p := range []string{"Load", "Store", "Add", "Swap", "CompareAndSwap", "And", "Or"} {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	for _, gf := range moduleFiles(t) {
		for _, hit := range selectorCalls(gf, "sync/atomic", untyped) {
			t.Errorf("%s: use the typed atomics (atomic.Uint32 and friends), not the functions", hit)
		}
	}
}

func TestLintPackageDocs(t *testing.T) {
	documented := map[string]bool{}
	for _, gf := range moduleFiles(t) {
		if strings.HasSuffix(gf.path, "_test.go") {
			continue
		}
		dir := filepath.Dir(gf.path)
		if _, ok := documented[dir]; !ok {
			documented[dir] = false
		}
		if gf.ast.Doc != nil && strings.TrimSpace(gf.ast.Doc.Text()) != "" {
			documented[dir] = true
		}
	}
	for _, dir := range sortedKeys(documented) {
		if !documented[dir] {
			t.Errorf("package in %s has no package doc comment (add a doc.go)", dir)
		}
	}
}

func TestLintGoleakInEveryTestMain(t *testing.T) {
	hasTests := map[string]bool{}
	hasLeakCheck := map[string]bool{}
	for _, gf := range moduleFiles(t) {
		if !strings.HasSuffix(gf.path, "_test.go") {
			continue
		}
		dir := filepath.Dir(gf.path)
		hasTests[dir] = true
		if importName(gf.ast, "go.uber.org/goleak") == "" {
			continue
		}
		for _, d := range gf.ast.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "TestMain" && fn.Recv == nil {
				hasLeakCheck[dir] = true
			}
		}
	}
	for _, dir := range sortedKeys(hasTests) {
		if !hasLeakCheck[dir] {
			t.Errorf("tests in %s have no TestMain using goleak", dir)
		}
	}
}

// layering is DESIGN.md's import table: the module's packages the non-test
// files of each room may import. A package follows the rule of the longest
// room that holds it, and naming a room admits every package under it, so
// "internal" admits internal/front. A package with no room here fails the
// lint: a new room gets a row (and a line in docs/layout.md's table)
// before it gets code.
var layering = []struct {
	room string
	may  []string
}{
	{".", nil}, // the module root: package docs and these lint rules
	{"pool", nil},
	// The runner contract: what srcs, the runners and the engine agree on
	// below the user's API. srcs builds on it, so it builds on pool only.
	{"internal/contract", []string{"pool"}},
	{"srcs", []string{"pool", "internal/contract"}},
	// internal packages may build on one another (srcstest runs the
	// mosquitto broker for tests).
	{"internal", []string{"pool", "srcs", "internal"}},
	{"ring", []string{"pool", "srcs", "internal"}},
	{"fallback", []string{"pool", "srcs", "internal"}},
	{"engine", []string{"pool", "srcs", "internal", "ring", "fallback"}},
	// The engine's adapters: outputs and metrics on the engine's API.
	{"engine/jetstream", []string{"engine", "srcs", "pool"}},
	{"engine/metrics", []string{"engine", "srcs", "pool"}},
	// The operator's node: YAML, outputs, metrics endpoint, signals, on
	// the engine and its adapters.
	{"engine/node", []string{"engine", "srcs", "pool"}},
	// Commands: thin drivers over the node.
	{"cmd", []string{"engine", "srcs", "pool"}},
	// The bench drives the engine and its adapters; the soak runs the
	// mosquitto broker.
	{"bench", []string{"engine", "srcs", "pool", "internal/mosquitto"}},
	{"bench/cmd", []string{"bench"}},
	// The gnet reference sink is a module of its own, so that gnet stays
	// out of sluice's module graph; it imports nothing of sluice.
	{"bench/gnetsink", nil},
}

// testHelperPkgs exist only for tests: no other file may import them (but
// one another), so neither the library nor the bench links test code.
var testHelperPkgs = []string{"internal/srcstest", "internal/recordtest", "internal/runnertest", "internal/testca"}

// testHelper returns the test-helper package that holds pkg, or "".
func testHelper(pkg string) string {
	for _, h := range testHelperPkgs {
		if under(pkg, h) {
			return h
		}
	}
	return ""
}

// under reports whether the package at slash path pkg is room or lies
// under it.
func under(pkg, room string) bool {
	return pkg == room || room == "." || strings.HasPrefix(pkg, room+"/")
}

// importViolations returns what the non-test file at path, with the
// parsed imports of f, imports against the layering and the test-helper
// rule, one message per forbidden import.
func importViolations(path string, f *ast.File) []string {
	pkg := filepath.ToSlash(filepath.Dir(path))
	rule := -1
	for i, r := range layering {
		if (r.room == "." && pkg == ".") || (r.room != "." && under(pkg, r.room)) {
			if rule < 0 || len(r.room) > len(layering[rule].room) {
				rule = i
			}
		}
	}
	if rule < 0 {
		return []string{fmt.Sprintf("%s: package %s has no row in the layering table (lint_test.go); add one, as DESIGN.md's import table would", path, pkg)}
	}
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		rel, ok := strings.CutPrefix(p, modulePath+"/")
		if !ok || rel == pkg {
			continue
		}
		if helper := testHelper(rel); helper != "" && testHelper(pkg) == "" {
			// Only tests, and the test helpers themselves, may.
			out = append(out, fmt.Sprintf("%s imports %s, a package for tests only", path, p))
			continue
		}
		allowed := false
		for _, room := range layering[rule].may {
			allowed = allowed || under(rel, room)
		}
		if !allowed {
			may := "nothing of ours"
			if len(layering[rule].may) > 0 {
				may = strings.Join(layering[rule].may, ", ")
			}
			out = append(out, fmt.Sprintf("%s imports %s: %s/ may import %s (DESIGN.md's import table)", path, p, layering[rule].room, may))
		}
	}
	return out
}

func TestLintLayering(t *testing.T) {
	for _, gf := range moduleFiles(t) {
		if strings.HasSuffix(gf.path, "_test.go") {
			continue
		}
		for _, v := range importViolations(gf.path, gf.ast) {
			t.Error(v)
		}
	}
}

// TestLintLayeringCatchesSlips checks the rule itself on made-up files.
func TestLintLayeringCatchesSlips(t *testing.T) {
	for _, tt := range []struct {
		path    string
		imports []string
		want    string // a substring of the one violation; "" for none
	}{
		{"pool/pool.go", []string{"srcs"}, "pool/ may import nothing of ours"},
		{"srcs/tcp.go", []string{"pool"}, ""},
		{"srcs/tcp.go", []string{"ring"}, "srcs/tcp.go imports github.com/sluice-io/sluice/ring: srcs/ may import pool"},
		{"srcs/tcp.go", []string{"internal/contract"}, ""},
		{"srcs/tcp.go", []string{"internal/driver"}, "srcs/ may import pool, internal/contract"},
		{"internal/contract/lane.go", []string{"pool"}, ""},
		{"internal/contract/lane.go", []string{"srcs"}, "internal/contract/ may import pool"},
		{"ring/runner_linux.go", []string{"internal/front", "pool", "srcs"}, ""},
		{"ring/runner_linux.go", []string{"fallback"}, "ring/ may import pool, srcs, internal"},
		{"fallback/epoll_linux.go", []string{"ring"}, "fallback/ may import"},
		{"internal/front/table.go", []string{"engine"}, "internal/ may import"},
		{"engine/select.go", []string{"ring", "fallback", "internal/flush"}, ""},
		{"engine/metrics/metrics.go", []string{"ring"}, "engine/metrics/ may import engine"},
		{"bench/probe.go", []string{"ring"}, "bench/ may import engine"},
		{"bench/soak.go", []string{"engine", "internal/mosquitto"}, ""},
		{"bench/soak.go", []string{"internal/srcstest"}, "a package for tests only"},
		{"engine/engine.go", []string{"internal/srcstest"}, "a package for tests only"},
		{"internal/srcstest/env.go", []string{"internal/mosquitto"}, ""},
		{"bench/cmd/sluice-bench/main.go", []string{"bench"}, ""},
		{"node/node.go", []string{"engine"}, "no row in the layering table"},
		{"engine/node/node.go", []string{"engine", "engine/jetstream", "engine/metrics", "srcs"}, ""},
		{"engine/node/node.go", []string{"ring"}, "engine/node/ may import engine, srcs, pool"},
		{"cmd/sluice/main.go", []string{"engine/node"}, ""},
		{"cmd/sluice/main.go", []string{"bench"}, "cmd/ may import engine"},
	} {
		src := "package x\nimport (\n"
		for _, imp := range tt.imports {
			src += strconv.Quote(modulePath+"/"+imp) + "\n"
		}
		src += ")\n"
		f, err := parser.ParseFile(token.NewFileSet(), tt.path, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		got := importViolations(tt.path, f)
		switch {
		case tt.want == "" && len(got) > 0:
			t.Errorf("%s importing %v: unexpected %q", tt.path, tt.imports, got)
		case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
			t.Errorf("%s importing %v: got %q, want one violation containing %q", tt.path, tt.imports, got, tt.want)
		}
	}
}

// benchOnlyModules are modules only the bench may pull in: a library user
// who imports the engine, the runners or the sources must not build them.
var benchOnlyModules = []string{"gonum.org/v1/plot", "github.com/panjf2000/gnet"}

// libraryRooms are the packages a library user imports.
var libraryRooms = []string{"./pool/...", "./srcs/...", "./ring/...", "./fallback/...", "./engine/...", "./internal/..."}

// TestLintGnetOutsideTheModule keeps gnet, the bench's reference peer, out
// of sluice's module graph: it lives in bench/gnetsink, a module of its
// own, which the bench builds as a separate binary.
func TestLintGnetOutsideTheModule(t *testing.T) {
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("panjf2000/gnet")) {
			t.Errorf("%s names gnet: it belongs in bench/gnetsink/go.mod only, so that sluice's users never inherit it", f)
		}
	}
	if _, err := os.Stat("bench/gnetsink/go.mod"); err != nil {
		t.Errorf("bench/gnetsink must be a module of its own: %v", err)
	}
}

// TestLintBenchOnlyDependencies checks that no library package, nor any
// package it imports, comes from a bench-only module (the plotting library,
// gnet): they may sit in go.mod for the bench, but must not be built into
// a user's program.
func TestLintBenchOnlyDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, goos := range []string{"linux", "darwin"} {
		cmd := exec.Command(goBin, append([]string{"list", "-deps", "-test=false", "-f", "{{.ImportPath}}"}, libraryRooms...)...)
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("go list (GOOS=%s): %v\n%s", goos, err, ee.Stderr)
			}
			t.Fatalf("go list: %v", err)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			for _, m := range benchOnlyModules {
				if line == m || strings.HasPrefix(line, m+"/") {
					t.Errorf("GOOS=%s: a library package depends on %s, which only the bench may use", goos, line)
				}
			}
		}
	}
}

func TestLintNoStdlibShadowingPackages(t *testing.T) {
	shadows := map[string]bool{"errors": true, "sync": true, "time": true, "net": true, "os": true, "io": true}
	for _, gf := range moduleFiles(t) {
		if name := gf.ast.Name.Name; shadows[name] {
			t.Errorf("%s: package %s shadows the standard library", gf.path, name)
		}
	}
}

func TestLintGofmt(t *testing.T) {
	for _, gf := range moduleFiles(t) {
		src, err := os.ReadFile(gf.path)
		if err != nil {
			t.Fatal(err)
		}
		formatted, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", gf.path, err)
			continue
		}
		if !bytes.Equal(src, formatted) {
			t.Errorf("%s is not gofmt-formatted", gf.path)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
