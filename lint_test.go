package sluice_test

import (
	"bytes"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
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

// unsafeAllowed says where DESIGN.md lets unsafe live: the kernel interface
// in ring/, and the slab allocator in pool/.
func unsafeAllowed(path string) bool {
	return strings.HasPrefix(path, "ring/") || strings.HasPrefix(path, "pool/slab")
}

// rawSyscallFile is the one file that may make raw io_uring system calls.
const rawSyscallFile = "ring/sys_linux.go"

func TestLintUnsafeOnlyInRingAndSlab(t *testing.T) {
	for _, gf := range moduleFiles(t) {
		if importName(gf.ast, "unsafe") != "" && !unsafeAllowed(gf.path) {
			t.Errorf("%s imports unsafe; only ring/ and pool/slab*.go may", gf.path)
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
		if gf.path == rawSyscallFile {
			continue
		}
		for _, pkg := range []string{"syscall", "golang.org/x/sys/unix"} {
			for _, hit := range selectorCalls(gf, pkg, raw) {
				t.Errorf("%s: raw system calls belong in %s only", hit, rawSyscallFile)
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

// testHelperPkgs are packages that exist only for tests: no other file may
// import them, so neither the library nor the bench links test code.
var testHelperPkgs = []string{modulePath + "/internal/srcstest"}

func TestLintTestHelpersOnlyInTests(t *testing.T) {
	for _, gf := range moduleFiles(t) {
		if strings.HasSuffix(gf.path, "_test.go") {
			continue
		}
		for _, pkg := range testHelperPkgs {
			if importName(gf.ast, pkg) != "" && !strings.HasPrefix(gf.path, strings.TrimPrefix(pkg, modulePath+"/")+"/") {
				t.Errorf("%s imports %s, a package for tests only", gf.path, pkg)
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
