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
	"path"
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

// unsafeAllowed says where unsafe may live: the kernel interfaces,
// io_uring's in internal/runner/uring/ and recvmmsg's (which x/sys lacks) in
// internal/runner/mmsg/, and the slab allocator in pool/.
func unsafeAllowed(path string) bool {
	return strings.HasPrefix(path, "internal/runner/uring/") || strings.HasPrefix(path, "internal/runner/mmsg/") || strings.HasPrefix(path, "pool/slab")
}

// rawSyscallFiles are the files that may make raw system calls: io_uring's
// in internal/runner/uring/, and recvmmsg's for the runners that read datagram
// sockets themselves.
var rawSyscallFiles = []string{"internal/runner/uring/sys_linux.go", "internal/runner/mmsg/mmsg_linux.go"}

func TestLintUnsafeOnlyInKernelRoomsAndSlab(t *testing.T) {
	for _, gf := range moduleFiles(t) {
		if importName(gf.ast, "unsafe") != "" && !unsafeAllowed(gf.path) {
			t.Errorf("%s imports unsafe; only internal/runner/uring/, internal/runner/mmsg/ and pool/slab*.go may", gf.path)
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

// shortFuncRooms are the rooms (with every package under them) whose
// functions stay within maxFuncLines: the runners' event loops and the
// floors under them, and the JetStream publisher, where a long function
// hides a state machine.
var shortFuncRooms = []string{"ring", "fallback", "internal/contract", "internal/runner", "engine/jetstream"}

const maxFuncLines = 80

func TestLintShortFunctionsInTheLoops(t *testing.T) {
	for _, gf := range moduleFiles(t) {
		dir := path.Dir(gf.path)
		inRoom := slices.ContainsFunc(shortFuncRooms, func(r string) bool { return dir == r || strings.HasPrefix(dir, r+"/") })
		if strings.HasSuffix(gf.path, "_test.go") || !inRoom {
			continue
		}
		for _, d := range gf.ast.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			from, to := gf.fset.Position(fd.Pos()), gf.fset.Position(fd.End())
			if n := to.Line - from.Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines; functions in %s stay within %d", from, fd.Name.Name, n, dir, maxFuncLines)
			}
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

// layering is the import order docs/layout.md draws: the module's
// packages the non-test files of each room may import. A package follows
// the rule of the longest room that holds it, and naming a room admits
// every package under it, so "internal" admits internal/runner/front. A package
// with no room here fails the lint: a new room gets a row (and a line in
// docs/layout.md's table) before it gets code.
var layering = []struct {
	room string
	may  []string
}{
	{".", nil}, // the module root: package docs and these lint rules
	{"pool", nil},
	// The runner contract: what srcs, the runners and the engine agree on
	// below the user's API. srcs builds on it, so it builds on pool only.
	{"internal/contract", []string{"pool"}},
	// TLS certificates and CAs served from files, for srcs's TLSConfig.
	{"internal/wire/certs", nil},
	// The MQTT packet codec of the MQTT source (srcs/mqtt).
	{"internal/wire/mqtt", nil},
	// The PROXY protocol of srcs's listeners: the header's bytes read
	// exactly, first bytes sniffed, address lists; no parser.
	{"internal/wire/proxy", nil},
	// Where srcs finds TLS and the PROXY protocol, which srcs/trust
	// provides when a program links it.
	{"internal/wire/trusthook", nil},
	// How a source reads a TLS session it waits on, through io.Reader
	// only: srcs's connections and the MQTT source share it, and neither
	// links crypto/tls through it.
	{"internal/wire/tlsread", []string{"internal/contract"}},
	// io_uring's kernel interface, under the uring runner (ring/) alone.
	{"internal/runner/uring", nil},
	{"srcs", []string{"pool", "internal/contract", "internal/wire/certs", "internal/wire/proxy", "internal/wire/trusthook", "internal/wire/tlsread"}},
	// TLS and the PROXY protocol's parser for srcs's listeners and
	// clients, registered in internal/wire/trusthook: apart from srcs, so that
	// a program that serves neither links neither.
	{"srcs/trust", []string{"pool", "srcs", "internal/contract", "internal/wire/certs", "internal/wire/trusthook"}},
	// The MQTT source, on srcs's vocabulary, with its packet codec (and
	// mochi-mqtt's) and a broker's TLS (srcs/trust): apart from srcs, so
	// that a program that reads no MQTT links none of them.
	{"srcs/mqtt", []string{"pool", "srcs", "srcs/trust", "internal/contract", "internal/wire/mqtt", "internal/wire/tlsread"}},
	// What the runners build on, above srcs: the lane machine and the
	// event-loop workers' books (driver), what stands in front of those
	// workers (front) and recvmmsg (mmsg); io_uring's kernel interface
	// (uring) has its row above.
	{"internal/runner", []string{"pool", "srcs", "internal/contract", "internal/runner"}},
	{"ring", []string{"pool", "srcs", "internal/contract", "internal/runner"}},
	{"fallback", []string{"pool", "srcs", "internal/contract", "internal/runner"}},
	{"engine", []string{"pool", "srcs", "internal/contract", "ring", "fallback"}},
	// The engine's adapters: outputs and metrics on the engine's API.
	{"engine/jetstream", []string{"engine", "srcs", "pool"}},
	{"engine/metrics", []string{"engine", "srcs", "pool"}},
	// The operator's node: YAML, outputs, metrics endpoint, signals, on
	// the engine and its adapters.
	// Tests' engines: an engine listening on a loopback port, shut down
	// when the test ends (a test helper: only tests import it).
	{"internal/testkit/enginetest", []string{"engine", "srcs"}},
	// What tests run on, apart from every floor: helpers only tests
	// import (testHelperPkgs), a seeded source, and the mosquitto broker
	// the soak runs too (srcstest runs it for tests).
	{"internal/testkit", []string{"pool", "srcs", "internal/contract", "internal/testkit"}},
	{"internal/app/node", []string{"engine", "engine/jetstream", "engine/metrics", "srcs", "pool"}},
	// Commands: thin drivers over the node.
	{"cmd", []string{"engine", "srcs", "pool", "internal/app/node"}},
	// The example programs: what a user of the library writes, on its
	// public packages only.
	{"examples", []string{"engine", "srcs", "pool"}},
	// The bench drives the engine and its adapters.
	{"bench", []string{"engine", "srcs", "pool", "bench/harness", "bench/load", "bench/peers", "bench/report"}},
	// The bench's rooms, each named exactly (exactRooms): the child
	// processes and the machine they run on, the built-in load, the
	// reference sinks, and the figures reports share.
	{"bench/harness", []string{"engine", "srcs", "pool", "bench/report"}},
	{"bench/load", []string{"srcs", "bench/harness", "bench/report"}},
	{"bench/peers", []string{"bench/harness"}},
	{"bench/benchtest", nil},
	{"bench/report", nil},
	// The scenarios, one room each, on the measurement every scenario
	// makes (bench) and the harness, load, peers and report rooms; run
	// and arrivals read reports in the sink command's format.
	{"bench/arrivals", append([]string{"bench/sink"}, benchScenario...)},
	{"bench/file", benchScenario},
	{"bench/floor", benchScenario},
	{"bench/idle", benchScenario},
	{"bench/jetstream", benchScenario},
	{"bench/latency", benchScenario},
	{"bench/probe", benchScenario},
	{"bench/run", append([]string{"bench/sink"}, benchScenario...)},
	{"bench/sink", benchScenario},
	{"bench/wirecheck", benchScenario},
	// sluice-bench, a thin driver over the scenarios.
	{"cmd/sluice-bench", append([]string{"bench", "bench/harness", "bench/load", "bench/report"}, benchScenarios...)},
	// The soak, a reliability test rather than a benchmark, on the
	// bench's harness, with the mosquitto broker; and its command.
	{"internal/app/soak", []string{"engine", "srcs", "pool", "internal/testkit/mosquitto", "bench/harness", "bench/report"}},
	{"cmd/sluice-soak", []string{"internal/app/soak", "bench/harness"}},
	// The gnet reference sink is a module of its own, so that gnet stays
	// out of sluice's module graph; it imports nothing of sluice.
	{"bench/gnetsink", nil},
}

// kernelRoom is io_uring's kernel interface, and kernelRoomUser the one
// room that builds on it: the rest of the module reads the kernel through
// ring's Probe and Runner.
const kernelRoom, kernelRoomUser = "internal/runner/uring", "ring"

// testHelperPkgs exist only for tests: no other file may import them (but
// one another), so neither the library nor the bench links test code.
var testHelperPkgs = []string{"internal/testkit/srcstest", "internal/testkit/recordtest", "internal/testkit/runnertest", "internal/testkit/testca", "internal/testkit/enginetest", "internal/testkit/exampletest", "bench/benchtest"}

// testHelper returns the test-helper package that holds pkg, or "".
func testHelper(pkg string) string {
	for _, h := range testHelperPkgs {
		if under(pkg, h) {
			return h
		}
	}
	return ""
}

// benchScenarios are the bench's scenario rooms, and benchScenario what
// each may import.
var (
	benchScenarios = []string{"bench/arrivals", "bench/file", "bench/floor", "bench/idle", "bench/jetstream", "bench/latency", "bench/probe", "bench/run", "bench/sink", "bench/wirecheck"}
	benchScenario  = []string{"engine", "srcs", "pool", "bench", "bench/harness", "bench/load", "bench/peers", "bench/report"}
)

// exactRooms are rooms that hold one package and admit none under them,
// so a package added beneath one needs a row of its own.
var exactRooms = append([]string{"bench", "bench/benchtest", "bench/harness", "bench/load", "bench/peers", "bench/report"}, benchScenarios...)

// under reports whether the package at slash path pkg is room or lies
// under it (is room, for the exactRooms).
func under(pkg, room string) bool {
	if slices.Contains(exactRooms, room) {
		return pkg == room
	}
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
		return []string{fmt.Sprintf("%s: package %s has no row in the layering table (lint_test.go); add one, and a line in docs/layout.md's table", path, pkg)}
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
		if under(rel, kernelRoom) && !under(pkg, kernelRoomUser) {
			out = append(out, fmt.Sprintf("%s imports %s: only %s/ may, the io_uring runner it is the kernel interface of", path, p, kernelRoomUser))
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
			out = append(out, fmt.Sprintf("%s imports %s: %s/ may import %s (docs/layout.md)", path, p, layering[rule].room, may))
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
		{"srcs/tcp.go", []string{"internal/runner/driver"}, "srcs/ may import pool, internal/contract, internal/wire/certs, internal/wire/proxy, internal/wire/trusthook, internal/wire/tlsread"},
		{"srcs/tcp.go", []string{"internal/wire/mqtt"}, "srcs/ may import pool, internal/contract"},
		{"srcs/mqtt/mqtt.go", []string{"srcs", "srcs/trust", "internal/wire/mqtt", "internal/wire/tlsread"}, ""},
		{"srcs/mqtt/mqtt.go", []string{"engine"}, "srcs/mqtt/ may import"},
		{"srcs/trust/trust.go", []string{"srcs", "internal/wire/certs", "internal/wire/trusthook"}, ""},
		{"srcs/trust/trust.go", []string{"engine"}, "srcs/trust/ may import"},
		{"internal/wire/certs/certs.go", []string{"pool"}, "internal/wire/certs/ may import nothing of ours"},
		{"internal/contract/lane.go", []string{"pool"}, ""},
		{"internal/contract/lane.go", []string{"srcs"}, "internal/contract/ may import pool"},
		{"ring/runner_linux.go", []string{"internal/runner/front", "pool", "srcs"}, ""},
		{"ring/runner_linux.go", []string{"fallback"}, "ring/ may import pool, srcs, internal"},
		{"ring/worker_linux.go", []string{"internal/runner/uring", "internal/runner/front"}, ""},
		{"internal/runner/uring/ring_linux.go", []string{"pool"}, "internal/runner/uring/ may import nothing of ours"},
		{"fallback/epoll_linux.go", []string{"internal/runner/uring"}, "only ring/ may"},
		{"engine/probe.go", []string{"internal/runner/uring"}, "only ring/ may"},
		{"internal/runner/front/table.go", []string{"internal/runner/uring"}, "only ring/ may"},
		{"fallback/epoll_linux.go", []string{"ring"}, "fallback/ may import"},
		{"internal/runner/front/table.go", []string{"engine"}, "internal/runner/ may import"},
		{"engine/engine.go", []string{"internal/runner/driver"}, "engine/ may import"},
		{"internal/wire/tlsread/tlsread.go", []string{"srcs"}, "internal/wire/tlsread/ may import internal/contract"},
		{"engine/select.go", []string{"ring", "fallback", "internal/contract"}, ""},
		{"engine/metrics/metrics.go", []string{"ring"}, "engine/metrics/ may import engine"},
		{"bench/probe.go", []string{"ring"}, "bench/ may import engine"},
		{"internal/app/soak/soak.go", []string{"engine", "internal/testkit/mosquitto", "bench/harness"}, ""},
		{"internal/app/soak/soak.go", []string{"internal/testkit/srcstest"}, "a package for tests only"},
		{"bench/run.go", []string{"internal/testkit/mosquitto"}, "bench/ may import engine"},
		{"cmd/sluice-soak/main.go", []string{"internal/app/soak"}, ""},
		{"engine/engine.go", []string{"internal/testkit/srcstest"}, "a package for tests only"},
		{"internal/testkit/srcstest/env.go", []string{"internal/testkit/mosquitto"}, ""},
		{"cmd/sluice-bench/main.go", []string{"bench", "bench/latency"}, ""},
		{"cmd/sluice-bench/main.go", []string{"ring"}, "cmd/sluice-bench/ may import bench"},
		{"bench/report/units.go", []string{"bench/harness"}, "bench/report/ may import nothing of ours"},
		{"bench/harness/sys.go", []string{"bench"}, "bench/harness/ may import engine, srcs, pool, bench/report"},
		{"bench/newroom/x.go", []string{"engine"}, "no row in the layering table"},
		{"bench/latency/latency.go", []string{"bench", "bench/load", "bench/report"}, ""},
		{"bench/latency/latency.go", []string{"bench/file"}, "bench/latency/ may import engine"},
		{"bench/measure.go", []string{"bench/run"}, "bench/ may import engine"},
		{"bench/run/run.go", []string{"bench", "bench/sink", "bench/peers"}, ""},
		{"bench/sink/sink.go", []string{"bench/run"}, "bench/sink/ may import engine"},
		{"node/node.go", []string{"engine"}, "no row in the layering table"},
		{"internal/app/node/node.go", []string{"engine", "engine/jetstream", "engine/metrics", "srcs", "pool"}, ""},
		{"internal/app/node/node.go", []string{"ring"}, "internal/app/node/ may import engine, engine/jetstream, engine/metrics, srcs, pool"},
		{"internal/app/node/node.go", []string{"internal/runner/front"}, "internal/app/node/ may import engine"},
		{"cmd/sluice/main.go", []string{"internal/app/node"}, ""},
		{"cmd/sluice/main.go", []string{"internal/runner/front"}, "cmd/ may import engine"},
		{"cmd/sluice/main.go", []string{"bench"}, "cmd/ may import engine"},
		{"examples/linecount/main.go", []string{"engine", "srcs"}, ""},
		{"examples/linecount/main.go", []string{"internal/app/node"}, "examples/ may import engine, srcs, pool"},
		{"examples/linecount/main.go", []string{"internal/testkit/exampletest"}, "a package for tests only"},
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

// srcsExported is what srcs exports: the sources a program adds, their
// configuration, the framers, the chunk flags, the errors a program
// matches, and the capabilities a source of its own may offer. What only
// the engine and the runners use belongs in internal/contract or
// internal/runner/driver, where users need not read past it.
var srcsExported = []string{
	// The vocabulary and the capabilities a user's source may offer.
	"Source", "ID", "Flags", "Partial", "EndOfStream", "Datagrams", "Records", "Truncated", "Logger",
	"Backoff", "DefaultBackoffInitial", "DefaultBackoffMax",
	"Deadliner", "Reconnector", "Repeater", "ReleaseObserver", "ChunkObserver",
	"DropCounter", "Identified", "Framed", "SourceError",
	// The sources and their configuration.
	"Listener", "ListenTCP", "ListenUnix", "ListenerConfig", "ListenerStats",
	"TLSConfig", "ClientAuthNone", "ClientAuthRequire", "ClientAuthVerifyIfGiven",
	"ProxyProtocolConfig", "DefaultHandshakeTimeout", "DefaultMaxHandshakes",
	"Secret", "LoadSecret", "Redacted",
	"TCPClient", "NewTCPClient", "TCPClientConfig", "DefaultDialTimeout",
	"UnixClient", "NewUnixClient", "UnixClientConfig",
	"Conn", "NewConn",
	"UDPSource", "ListenUDP", "UDPConfig", "MaxUDPPayload",
	"FileSource", "NewFile", "FileConfig",
	"Tail", "NewTail", "TailConfig", "DefaultTailPoll", "Position",
	"Checkpoint", "NewCheckpoint", "CheckpointError", "DefaultCheckpointEvery",
	// Framing, and decoding what arrives.
	"Framer", "ParseFraming", "Newline", "LengthPrefix", "OctetCounting", "MQTTPackets",
	"MaxOctetDigits", "CountRecords", "RecordError", "SkipToBoundary",
	"ForEachDatagram", "DatagramHeaderLen",
	// Errors a program matches.
	"ErrStopped", "ErrReset", "ErrTimeout", "ErrNoDescriptor", "ErrMalformed",
	"ErrRecordTooLong", "ErrTooLarge", "ErrMalformedDatagrams", "ErrDatagramTooLarge",
	"ErrProxyHeader", "ErrProxyUntrusted",
}

// mqttExported is what srcs/mqtt exports: the MQTT source, its
// configuration, counters and errors, and the decoding of its chunks.
var mqttExported = []string{
	"MQTT", "NewMQTT", "MQTTConfig", "MQTTStats", "DefaultMQTTKeepAlive", "DefaultMQTTMaxMessage",
	"MQTTConnectError", "MQTTSubscribeError", "ForEachMQTTMessage", "MQTTMessage",
}

// srcsRunnerMethods are the exported methods of srcs's types whose
// signatures name internal packages: what a runner asks of a source, which
// must be exported to satisfy internal/contract's interfaces. A program
// has no use for them; keep the list short.
var srcsRunnerMethods = []string{
	"Conn.Desc", "FileSource.Desc", "TCPClient.Desc",
	"UDPSource.Desc", "UnixClient.Desc", "Listener.AcceptThrough",
}

// runnerContract names the runner contract's parts: the engine's exported
// API must name none of them, nor any internal package.
var runnerContract = []string{
	"Runner", "Lane", "RunnerRef", "RunnerConfig", "Emitter", "BytesEmitter", "WakeupHolder",
	"AcceptRunner", "AcceptQueue", "RunnerAccepted", "Directed", "Descriptor", "Desc", "HandOff",
}

// exportedAPI returns the exported top-level names of the package in dir
// (non-test files, every platform) and, for each exported function,
// method of an exported type (its own, or promoted from an unexported
// type it embeds), exported field or type whose declaration names one of
// the module's internal packages, "Name" or "Type.Name".
func exportedAPI(t *testing.T, files []goFile, dir string) (names map[string]bool, internalRefs []string) {
	t.Helper()
	names = map[string]bool{}
	seen := map[string]bool{}
	methodRefs := map[string][]string{} // receiver type: its exported methods that name internal packages
	embeds := map[string][]string{}     // struct type: the unexported types it embeds
	for _, gf := range files {
		if filepath.Dir(gf.path) != dir || strings.HasSuffix(gf.path, "_test.go") {
			continue
		}
		internal := map[string]bool{}
		for _, imp := range gf.ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, modulePath+"/internal/") {
				internal[importName(gf.ast, p)] = true
			}
		}
		namesInternal := func(n ast.Node) bool {
			hit := false
			ast.Inspect(n, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
						hit = true
					}
				}
				return !hit
			})
			return hit
		}
		ref := func(name string, n ast.Node) {
			if n != nil && namesInternal(n) && !seen[name] {
				seen[name] = true
				internalRefs = append(internalRefs, name)
			}
		}
		for _, d := range gf.ast.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names[d.Name.Name] = true
					ref(d.Name.Name, d.Type)
					continue
				}
				recv := d.Recv.List[0].Type
				if st, ok := recv.(*ast.StarExpr); ok {
					recv = st.X
				}
				if id, ok := recv.(*ast.Ident); ok && namesInternal(d.Type) {
					methodRefs[id.Name] = append(methodRefs[id.Name], d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, f := range st.Fields.List {
								typ := f.Type
								if star, ok := typ.(*ast.StarExpr); ok {
									typ = star.X
								}
								if id, ok := typ.(*ast.Ident); ok && len(f.Names) == 0 && !id.IsExported() {
									embeds[s.Name.Name] = append(embeds[s.Name.Name], id.Name)
								}
							}
						}
						if !s.Name.IsExported() {
							continue
						}
						names[s.Name.Name] = true
						switch typ := s.Type.(type) {
						case *ast.StructType:
							for _, f := range typ.Fields.List {
								for _, n := range f.Names {
									if n.IsExported() {
										ref(s.Name.Name+"."+n.Name, f.Type)
									}
								}
							}
						case *ast.InterfaceType:
							ref(s.Name.Name, typ)
						default:
							if s.Assign == 0 { // an alias names its target on purpose
								ref(s.Name.Name, typ)
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = true
								ref(n.Name, s.Type)
							}
						}
					}
				}
			}
		}
	}
	// The methods of an exported type, and those it promotes from the
	// unexported types it embeds.
	var promoted func(typ string, depth int) []string
	promoted = func(typ string, depth int) []string {
		ms := slices.Clone(methodRefs[typ])
		if depth < 4 {
			for _, e := range embeds[typ] {
				ms = append(ms, promoted(e, depth+1)...)
			}
		}
		return ms
	}
	for typ := range names {
		for _, m := range promoted(typ, 0) {
			if !seen[typ+"."+m] {
				seen[typ+"."+m] = true
				internalRefs = append(internalRefs, typ+"."+m)
			}
		}
	}
	return names, internalRefs
}

// ringExported is what ring exports: the io_uring runner the engine
// chooses, and the probe a program's start-up log or `sluice probe` reads,
// with the table of what it looks for.
var ringExported = []string{
	"Runner", "NewRunner",
	"Probe", "ProbeResult", "KernelVersion", "KernelFeature", "KernelFeatures", "ErrNotSupported",
}

// ringInternalRefs are ring's exported names whose declarations name
// internal packages: the runner contract a Runner implements, and the
// kernel's setup flags, features and opcodes in a ProbeResult, whose types
// are the kernel interface's (a program prints them).
var ringInternalRefs = []string{
	"NewRunner", "Runner.Add", "Runner.Remove", "Runner.StartAccept", "Runner.Stats",
	"ProbeResult.Flags", "ProbeResult.Features", "ProbeResult.MissingOps",
}

// checkSurface checks that the package in dir exports exactly the names of
// want (listed as wantName in this file), and that of its exported API only
// the names of refs (listed as refsName) name internal packages.
func checkSurface(t *testing.T, files []goFile, dir, wantName string, want []string, refsName string, refs []string, why string) {
	t.Helper()
	names, got := exportedAPI(t, files, dir)
	listed := map[string]bool{}
	for _, n := range want {
		listed[n] = true
		if !names[n] {
			t.Errorf("%s no longer exports %s: take it off %s in lint_test.go", dir, n, wantName)
		}
	}
	for _, n := range sortedKeys(names) {
		if !listed[n] {
			t.Errorf("%s exports %s, which %s (lint_test.go) does not list: %s", dir, n, wantName, why)
		}
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(refs)); !slices.Equal(got, want) {
		t.Errorf("%s's exported API names internal packages in %v; %s (lint_test.go) allows %v: "+
			"a program cannot use what it cannot name, so keep runner-only parts off %s's types", dir, got, refsName, want, dir)
	}
}

// TestLintExportedSurface keeps srcs and ring the size a program needs and
// the engine free of the runner contract: a name added to srcs or ring must
// be added to its list on purpose, and what only runners use goes internal.
func TestLintExportedSurface(t *testing.T) {
	files := moduleFiles(t)
	checkSurface(t, files, "srcs", "srcsExported", srcsExported, "srcsRunnerMethods", srcsRunnerMethods,
		"srcs is what a program uses to add sources; if a program needs it, list it there, and if only "+
			"the engine or the runners do, put it in internal/contract or internal/runner/driver")
	checkSurface(t, files, "srcs/mqtt", "mqttExported", mqttExported, "the MQTT source's Desc", []string{"MQTT.Desc"},
		"srcs/mqtt is what a program uses to add an MQTT source; if only the engine or the runners need it, put it in internal/contract")
	checkSurface(t, files, "ring", "ringExported", ringExported, "ringInternalRefs", ringInternalRefs,
		"ring is the io_uring runner and its probe; the kernel interface under them is internal/runner/uring")

	names, refs := exportedAPI(t, files, "engine")
	for _, r := range refs {
		t.Errorf("engine's exported %s names an internal package: the engine's API is for programs, "+
			"and the runner contract stays in internal/contract", r)
	}
	for _, n := range runnerContract {
		if names[n] {
			t.Errorf("engine exports %s, part of the runner contract: no option of the engine takes a runner; "+
				"keep it in internal/contract", n)
		}
	}
}
