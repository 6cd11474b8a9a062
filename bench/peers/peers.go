package peers

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
)

// Gnet names the gnet v2 reference row of `run --peers gnet`: a sink
// built on github.com/panjf2000/gnet/v2 that does the job of the engine's
// consumer in the bench (CRC-32C of every connection's bytes, newline
// records counted when framed), inline on gnet's event loops, one per CPU
// the engine may use. It is measured in the same rounds as the runners,
// in a process of its own pinned like the engine.
//
// gnet stays out of sluice's module graph: the sink is a module of its
// own in bench/gnetsink, which the bench builds with the go command into
// a cache directory (keyed by the hash of its sources) the first time it
// is needed, or takes ready built from --gnet-sink.
const Gnet = "gnet"

// Go names the row of the sink a user would write with Go's standard
// library alone (`run --peers go`): the same program as Gnet's, run
// with -net std, so a goroutine per connection reads into a 64 KiB buffer
// of its own and does the same work after every read. With run --tls it
// adds GoTLS beside it: the same sink behind a crypto/tls listener
// with the run's certificate, which is what TLS costs when nothing but Go
// carries it.
const Go = "go"

// GoTLS is Go behind a crypto/tls listener (run --tls --peers go).
const GoTLS = Go + "+tls"

// Epoll is what `run --peers` calls the simplest sink the kernel allows,
// and EpollRow names its row (apart from the epoll runner's): the same
// program as Gnet's, run with -net epoll, so one goroutine locked to its
// OS thread waits on one edge-triggered epoll instance (EPOLLIN,
// EPOLLRDHUP, EPOLLET), accepts on the listener, and reads each ready
// connection until EAGAIN into one shared 64 KiB buffer, doing the same
// work after every read while the bytes are in the cache. It is the
// floor under any event loop's cost. Linux only, TCP only.
const (
	Epoll    = "epoll"
	EpollRow = "bare-epoll"
)

// All returns every reference sink `run --peers` knows, by the name the
// flag takes.
func All() []string { return []string{Gnet, Go, Epoll} }

// Row returns the row a peer named on --peers is measured as.
func Row(peer string) string {
	if peer == Epoll {
		return EpollRow
	}
	return peer
}

// Rows returns the rows of the peers named on --peers, in order.
func Rows(peers []string) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = Row(p)
	}
	return out
}

// IsRow reports whether a row of a run is a reference sink's.
func IsRow(name string) bool {
	return name == Gnet || name == Go || name == GoTLS || name == EpollRow
}

// Args are the reference sinks' flags that choose the sink of row:
// gnet's event loops, Go's net package, or the bare epoll loop.
func Args(row string) []string {
	switch row {
	case Go, GoTLS:
		return []string{"-net", "std"}
	case EpollRow:
		return []string{"-net", "epoll"}
	}
	return nil
}

// gnetSinkDir is the gnet sink's module, relative to the sluice module's
// root.
const gnetSinkDir = "bench/gnetsink"

// findGnetSource looks for the gnet sink's module above the working
// directory and above this binary's directory.
func findGnetSource() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			dir := filepath.Join(d, filepath.FromSlash(gnetSinkDir))
			if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
				return dir, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("bench: --peers gnet: cannot find %s above %s; run sluice-bench from the sluice repository, or build the sink (go build -C %s) and pass it with --gnet-sink",
		gnetSinkDir, strings.Join(starts, " or "), gnetSinkDir)
}

// GoTool is the go command: on PATH, or in the toolchain this binary was
// built with.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// BuildGnet returns the gnet sink's binary, building it on first use
// into the user's cache directory under a name that hashes its sources,
// so a changed sink is rebuilt and an unchanged one is not.
func BuildGnet(ctx context.Context, ios harness.IO) (string, error) {
	src, err := findGnetSource()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	ents, err := os.ReadDir(src)
	if err != nil {
		return "", fmt.Errorf("bench: gnet sink: %w", err)
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".go") || n == "go.mod" || n == "go.sum") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			return "", fmt.Errorf("bench: gnet sink: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sluice-bench")
	bin := filepath.Join(dir, "gnetsink-"+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: gnet sink: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	fmt.Fprintf(ios.Err, "sluice-bench: building the gnet sink (%s) into %s\n", src, dir)
	cmd := exec.CommandContext(ctx, GoTool(), "build", "-o", tmp, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("bench: building the gnet sink in %s: %w\n%s", src, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("bench: gnet sink: %w", err)
	}
	return bin, nil
}

// Event is one line of the gnet sink's control protocol (see
// bench/gnetsink).
type Event struct {
	Event  string `json:"event"`
	Addr   string `json:"addr"`
	Open   int64  `json:"open"`
	Closed int64  `json:"closed"`
	Bytes  uint64 `json:"bytes"`
	CPUNs  int64  `json:"cpu_ns"`
	UnixNs int64  `json:"unix_ns"`
}

// GnetProc is a gnet sink in control mode.
type GnetProc struct {
	Cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan []byte // every line but "ended"
	Ended   chan Event  // the "ended" line
	Addr    string
	cancel  context.CancelFunc
	waited  bool
}

// StartGnet starts the gnet sink at bin in control mode, expecting n
// connections, with extra flags (peerArgs), on the sink's side of wire,
// and waits until it listens. It inherits this process's CPUs: the
// engine's.
func StartGnet(ctx context.Context, bin string, wire harness.WireEnv, n int, framing string, crc bool, extra []string, ios harness.IO) (*GnetProc, error) {
	pctx, cancel := context.WithCancel(ctx)
	args := append([]string{"-control", "-listen", wire.ListenAddr(), "-expect", strconv.Itoa(n), "-framing", framing,
		"-crc=" + strconv.FormatBool(crc)}, extra...)
	cmd := wire.Command(pctx, harness.SideSink, bin, args...)
	cmd.Stderr = ios.Err
	p := &GnetProc{Cmd: cmd, cancel: cancel, replies: make(chan []byte, 4), Ended: make(chan Event, 1)}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		cancel()
		return nil, fmt.Errorf("bench: gnet sink: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bench: gnet sink: %w", err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("bench: start the gnet sink %s: %w", bin, err)
	}
	go func() {
		defer close(p.replies)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 256<<20)
		for sc.Scan() {
			l := append([]byte(nil), sc.Bytes()...)
			var ev Event
			if json.Unmarshal(l, &ev) == nil && ev.Event == "ended" {
				p.Ended <- ev
				continue
			}
			p.replies <- l
		}
	}()
	var ev Event
	if err := p.reply(ctx, "listening", &ev); err != nil {
		p.Kill()
		return nil, err
	}
	p.Addr = ev.Addr
	return p, nil
}

// reply waits for the next line, which must be the named event, and
// decodes it into v.
func (p *GnetProc) reply(ctx context.Context, event string, v any) error {
	select {
	case l, ok := <-p.replies:
		if !ok {
			return fmt.Errorf("bench: the gnet sink exited before its %q line: %v", event, p.Wait())
		}
		var ev Event
		if err := json.Unmarshal(l, &ev); err != nil || ev.Event != event {
			return fmt.Errorf("bench: gnet sink: want a %q line, got %q", event, l)
		}
		if err := json.Unmarshal(l, v); err != nil {
			return fmt.Errorf("bench: gnet sink: %w", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("bench: gnet sink: no %q line in 30s", event)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ask sends a command and decodes its answer into v.
func (p *GnetProc) Ask(ctx context.Context, cmd, event string, v any) error {
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		return fmt.Errorf("bench: gnet sink: %w", err)
	}
	return p.reply(ctx, event, v)
}

func (p *GnetProc) Wait() error {
	if p.waited {
		return nil
	}
	p.waited = true
	p.stdin.Close()
	for range p.replies {
	}
	err := p.Cmd.Wait()
	p.cancel()
	if err != nil {
		return fmt.Errorf("bench: gnet sink: %w", err)
	}
	return nil
}

func (p *GnetProc) Kill() {
	p.cancel()
	p.Wait()
}
