package run

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/benchtest"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"golang.org/x/sys/unix"
)

// buildTestWire builds a veth wire between CPUs 0 and 1, or skips t when
// this machine cannot build one (not root, no ip, no network namespaces),
// failing it instead under SLUICE_REQUIRE_URING=1, which CI sets: CI runs
// the bench as root, so the wire must be there.
func buildTestWire(t *testing.T, spec harness.WireSpec) *harness.WireTopo {
	t.Helper()
	if spec.SinkCPUs == nil {
		spec.SinkCPUs, spec.LoadCPUs = []int{0}, []int{1}
	}
	w, err := harness.BuildWire(context.Background(), spec)
	if err != nil {
		if errors.Is(err, harness.ErrWireUnavailable) && !srcstest.Required(srcstest.EnvRequireURing) {
			t.Skipf("%v; %s=1 fails instead", err, srcstest.EnvRequireURing)
		}
		t.Fatalf("build the wire: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// inNetns runs f on a thread switched into the named network namespace.
// Sockets f creates stay in that namespace whichever thread uses them
// later. The thread is never unlocked, so it ends with the goroutine and
// no other goroutine runs in the namespace.
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(filepath.Join(harness.NetnsDir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// wireLeftovers lists what this process's wires left behind: named
// namespaces and veth ends in this namespace.
func wireLeftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	nsPrefix := fmt.Sprintf("sluice-bench-%x.%d-", harness.PidNamespace(), os.Getpid())
	ifPrefix := fmt.Sprintf("sb%dx", os.Getpid())
	if ents, err := os.ReadDir(harness.NetnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), nsPrefix) {
				out = append(out, "netns "+e.Name())
			}
		}
	}
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ifPrefix) {
			out = append(out, "link "+e.Name())
		}
	}
	return out
}

// TestWireCarriesBytes builds the wire, sends bytes from the load's
// namespace to a listener in the sink's, checks that they arrive whole and
// that each end steers its receive work to its own side's CPU, and that
// tearing it down leaves no namespace or veth behind.
func TestWireCarriesBytes(t *testing.T) {
	w := buildTestWire(t, harness.WireSpec{})
	env := w.Env()

	var ln net.Listener
	if err := inNetns(w.SinkNS, func() (err error) {
		ln, err = net.Listen("tcp", env.ListenAddr())
		return err
	}); err != nil {
		t.Fatalf("listen in the sink's namespace: %v", err)
	}
	defer ln.Close()
	if h, _, _ := net.SplitHostPort(ln.Addr().String()); h != harness.WireSinkIP {
		t.Fatalf("listening on %s, want %s", ln.Addr(), harness.WireSinkIP)
	}
	// Nothing listens there from this namespace: the address exists only
	// inside the wire.
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatalf("dialled %s from outside the wire", ln.Addr())
	}

	payload := bytes.Repeat([]byte("sluice over the wire\n"), 50_000) // about 1 MiB
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	var peer string
	if err := inNetns(w.LoadNS, func() error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		peer = c.LocalAddr().String()
		_, err = c.Write(payload)
		return err
	}); err != nil {
		t.Fatalf("send from the load's namespace: %v", err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, payload) {
			t.Fatalf("received %d bytes, sent %d", len(b), len(payload))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing arrived in 30s")
	}
	if h, _, _ := net.SplitHostPort(peer); h != harness.WireLoadIP {
		t.Errorf("the load sent from %s, want %s", peer, harness.WireLoadIP)
	}

	// Each end's receive queue is steered to its own side's CPU, as seen
	// from inside its namespace (where a process started on that side
	// runs, through WireEnv.command).
	for _, c := range []struct {
		side, dev, want string
	}{{harness.SideSink, w.SinkIf, "1"}, {harness.SideLoad, w.LoadIf, "2"}} {
		out, err := env.Command(context.Background(), c.side, "cat", filepath.Join("/sys/class/net", c.dev, "queues/rx-0/rps_cpus")).Output()
		if err != nil {
			t.Fatalf("%s: read rps_cpus: %v", c.side, err)
		}
		if m := strings.TrimLeft(strings.TrimSpace(string(out)), "0,"); m != c.want {
			t.Errorf("%s: %s rps_cpus %q, want %s", c.side, c.dev, out, c.want)
		}
	}

	// Both sides' TCP backs off on a loss as Linux ships it, whatever the
	// host's default.
	if w.Congestion != "cubic" && w.Congestion != "reno" {
		t.Errorf("congestion control %q, want cubic or reno", w.Congestion)
	}
	for _, side := range []string{harness.SideSink, harness.SideLoad} {
		out, err := env.Command(context.Background(), side, "cat", "/proc/sys/net/ipv4/tcp_congestion_control").Output()
		if err != nil {
			t.Fatalf("%s: read tcp_congestion_control: %v", side, err)
		}
		if got := strings.TrimSpace(string(out)); got != w.Congestion {
			t.Errorf("%s: tcp_congestion_control %q, want %q", side, got, w.Congestion)
		}
	}

	ln.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if left := wireLeftovers(t); len(left) > 0 {
		t.Fatalf("left behind after Close: %v", left)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// TestWireTeardownOnError fails the build after each of its steps, and
// panics with a built wire, and checks that nothing is left behind.
func TestWireTeardownOnError(t *testing.T) {
	buildTestWire(t, harness.WireSpec{}).Close() // skips where no wire can be built
	for _, step := range []string{"netns", "veth", "rps", "move", "address", "congestion", "up"} {
		t.Run(step, func(t *testing.T) {
			injected := errors.New("injected")
			_, err := harness.BuildWire(context.Background(), harness.WireSpec{SinkCPUs: []int{0}, LoadCPUs: []int{1},
				Fail: func(s string) error {
					if s == step {
						return injected
					}
					return nil
				}})
			if !errors.Is(err, injected) || !errors.Is(err, harness.ErrWireUnavailable) {
				t.Fatalf("build failing at %s: %v", step, err)
			}
			if left := wireLeftovers(t); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
	t.Run("panic", func(t *testing.T) {
		func() {
			defer func() { recover() }()
			w := buildTestWire(t, harness.WireSpec{})
			defer w.Close()
			panic("measuring went wrong")
		}()
		if left := wireLeftovers(t); len(left) > 0 {
			t.Fatalf("left behind: %v", left)
		}
	})
}

// TestWireSweep checks that a wire left by a run that died is removed by
// the next build, and that one whose process lives is not.
func TestWireSweep(t *testing.T) {
	w := buildTestWire(t, harness.WireSpec{})
	dead := 0
	for pid := 4_000_000; pid > 3_000_000; pid-- {
		if unix.Kill(pid, 0) == unix.ESRCH {
			dead = pid
			break
		}
	}
	if dead == 0 {
		t.Skip("no unused PID found")
	}
	stale := fmt.Sprintf("sluice-bench-%x.%d-beef-sink", harness.PidNamespace(), dead)
	// A dead PID of another PID namespace's may be a live process there.
	foreign := fmt.Sprintf("sluice-bench-%x.%d-beef-sink", harness.PidNamespace()+1, dead)
	if out, err := exec.Command(w.IP, "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", stale, err, out)
	}
	if out, err := exec.Command(w.IP, "netns", "add", foreign).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", foreign, err, out)
	}
	t.Cleanup(func() {
		for _, ns := range []string{stale, foreign} {
			if _, err := os.Stat(filepath.Join(harness.NetnsDir, ns)); err == nil {
				exec.Command(w.IP, "netns", "del", ns).Run()
			}
		}
	})
	w2 := buildTestWire(t, harness.WireSpec{})
	defer w2.Close()
	if _, err := os.Stat(filepath.Join(harness.NetnsDir, stale)); err == nil {
		t.Errorf("the stale namespace %s is still there", stale)
	}
	if _, err := os.Stat(filepath.Join(harness.NetnsDir, w.SinkNS)); err != nil {
		t.Errorf("a live run's namespace was swept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(harness.NetnsDir, foreign)); err != nil {
		t.Errorf("another PID namespace's was swept: %v", err)
	}
}

// deadWires lists the namespaces of bench processes that have exited:
// what a run failed to tear down.
func deadWires(t *testing.T) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir(harness.NetnsDir)
	for _, e := range ents {
		m := harness.WireNSRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[2]); m[1] == fmt.Sprintf("%x", harness.PidNamespace()) && unix.Kill(pid, 0) == unix.ESRCH {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestWireCLI runs `run --wire veth` and `wire-check` as a user would,
// interrupts a run on the wire with SIGINT, and checks the reports and
// that every run tore its wire down.
func TestWireCLI(t *testing.T) {
	buildTestWire(t, harness.WireSpec{}).Close() // skips where no wire can be built
	bin := benchtest.BuildCLI(t)
	avail, _ := bench.AvailableRunners(harness.AllRunners())
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	stdout, stderr, status := benchtest.RunCLI(t, bin, "run", "--wire", "veth", "--runners", avail[0], "--sources", "8",
		"--duration", "1s", "--msg-size", "4KiB", "--json", jsonPath)
	if status != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	if !strings.Contains(stdout, "wire veth: sink "+harness.WireSinkIP) || !strings.Contains(stdout, "core s/GiB") {
		t.Errorf("the table does not name the wire or has no core column:\n%s", stdout)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Wire map[string]any   `json:"wire"`
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Wire["mode"] != harness.WireVeth || rep.Wire["sink_rps_cpus"] != "1" || rep.Wire["load_rps_cpus"] != "2" {
		t.Errorf("report's wire: %v", rep.Wire)
	}
	for _, r := range rep.Runs {
		core, _ := r["core_cpu_s_per_gib"].(float64)
		soft, _ := r["core_softirq_s_per_gib"].(float64)
		load, _ := r["load_core_cpu_s_per_gib"].(float64)
		if r["wire"] != harness.WireVeth || core <= 0 || soft <= 0 || soft > core || load <= 0 {
			t.Errorf("run %v: wire %v, core %v, softirq %v, load core %v", r["runner"], r["wire"], core, soft, load)
		}
	}
	if left := deadWires(t); len(left) > 0 {
		t.Fatalf("run left behind: %v", left)
	}

	stdout, stderr, status = benchtest.RunCLI(t, bin, "wire-check", "--duration", "1s", "--sources", "4")
	if status != 0 || !strings.Contains(stdout, "took") || strings.Contains(stdout, "FAILED") {
		t.Errorf("wire-check: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	if left := deadWires(t); len(left) > 0 {
		t.Fatalf("wire-check left behind: %v", left)
	}

	// Interrupted while measuring: the wire goes with the run.
	cmd := exec.Command(bin, "run", "--wire", "veth", "--runners", avail[0], "--sources", "4", "--duration", "60s")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	for sc.Scan() && !strings.Contains(sc.Text(), "wire veth") {
	}
	time.Sleep(time.Second) // into the measured round
	cmd.Process.Signal(os.Interrupt)
	go io.Copy(io.Discard, errPipe)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("run did not stop within 60s of SIGINT")
	}
	if left := deadWires(t); len(left) > 0 {
		t.Fatalf("an interrupted run left behind: %v", left)
	}
}
