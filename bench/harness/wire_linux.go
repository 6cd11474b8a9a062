package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// NetnsDir is where `ip netns` keeps its named namespaces.
const NetnsDir = "/run/netns"

// Names of what BuildWire creates carry the creating process's PID, so
// that a run killed before it could tear down is recognised and removed
// by the next one (sweepWires), and never one still running. A
// namespace's name also carries the creator's PID namespace (its inode),
// since /run/netns may be shared by containers whose PIDs are not ours to
// look up: only namespaces made from our own PID namespace are swept.
var (
	WireNSRE   = regexp.MustCompile(`^sluice-bench-([0-9a-f]+)\.([0-9]+)-[0-9a-f]{4}-(sink|load)$`)
	wireLinkRE = regexp.MustCompile(`^sb([0-9]+)x[0-9a-f]{4}[sl]$`)
)

// BuildWire builds the veth wire: the namespaces, the veth pair between
// them with an address at each end, and receive packet steering of each
// end's queue to its own side's CPUs. It needs root and the ip command
// (iproute2). On failure it removes whatever it created, and the error
// wraps ErrWireUnavailable.
func BuildWire(ctx context.Context, spec WireSpec) (*WireTopo, error) {
	unavailable := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrWireUnavailable}, args...)...)
	}
	if os.Geteuid() != 0 {
		return nil, unavailable("network namespaces need root (running as uid %d)", os.Geteuid())
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, unavailable("no ip command (iproute2) on PATH")
	}
	if len(spec.SinkCPUs) == 0 || len(spec.LoadCPUs) == 0 {
		return nil, unavailable("the sink and the load need CPUs of their own (two or more CPUs, and --pin)")
	}
	sweepWires(ctx, ip)
	pid := os.Getpid()
	tag := fmt.Sprintf("%04x", rand.N(1<<16))
	owner := fmt.Sprintf("%x.%d", PidNamespace(), pid)
	t := &WireTopo{IP: ip, spec: spec,
		SinkNS: fmt.Sprintf("sluice-bench-%s-%s-sink", owner, tag), LoadNS: fmt.Sprintf("sluice-bench-%s-%s-load", owner, tag),
		SinkIf: fmt.Sprintf("sb%dx%ss", pid, tag), LoadIf: fmt.Sprintf("sb%dx%sl", pid, tag)}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, ip, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"netns", func() error {
			if err := run("netns", "add", t.SinkNS); err != nil {
				return err
			}
			return run("netns", "add", t.LoadNS)
		}},
		{"veth", func() error { return run("link", "add", t.SinkIf, "type", "veth", "peer", "name", t.LoadIf) }},
		{"rps", func() error {
			// Set while both ends are still in this namespace, whose sysfs
			// is the one mounted here; the mask stays with the queue when
			// the device moves.
			if err := writeRPS(t.SinkIf, spec.SinkCPUs); err != nil {
				return err
			}
			return writeRPS(t.LoadIf, spec.LoadCPUs)
		}},
		{"move", func() error {
			if err := run("link", "set", t.SinkIf, "netns", t.SinkNS); err != nil {
				return err
			}
			return run("link", "set", t.LoadIf, "netns", t.LoadNS)
		}},
		{"address", func() error {
			if err := run("-n", t.SinkNS, "addr", "add", fmt.Sprintf("%s/%d", WireSinkIP, wirePrefix), "dev", t.SinkIf); err != nil {
				return err
			}
			return run("-n", t.LoadNS, "addr", "add", fmt.Sprintf("%s/%d", WireLoadIP, wirePrefix), "dev", t.LoadIf)
		}},
		{"congestion", func() error {
			cc, err := wireCongestion()
			if err != nil {
				return err
			}
			for _, ns := range []string{t.SinkNS, t.LoadNS} {
				cmd := exec.CommandContext(ctx, ip, "netns", "exec", ns, "sh", "-c",
					"echo "+cc+" > /proc/sys/net/ipv4/tcp_congestion_control")
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("tcp_congestion_control %s in %s: %v: %s", cc, ns, err, bytes.TrimSpace(out))
				}
			}
			t.Congestion = cc
			return nil
		}},
		{"up", func() error {
			for _, a := range [][]string{
				{"-n", t.SinkNS, "link", "set", "lo", "up"}, {"-n", t.LoadNS, "link", "set", "lo", "up"},
				{"-n", t.SinkNS, "link", "set", t.SinkIf, "up"}, {"-n", t.LoadNS, "link", "set", t.LoadIf, "up"},
			} {
				if err := run(a...); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		err := s.do()
		if err == nil && spec.Fail != nil {
			err = spec.Fail(s.name)
		}
		if err != nil {
			t.Close()
			return nil, unavailable("%s: %w", s.name, err)
		}
	}
	return t, nil
}

// wireCongestion is the TCP congestion control both namespaces use:
// cubic, Linux's own default, where the host allows it, and otherwise
// reno; both back off on a loss and recover within round trips. A
// namespace starts with the host's default, which may be one (bbr) that
// after the drops of a sink whose receive queues overflow paces its
// sender at a few kilobytes a second for a minute: a round then measures
// the sender's recovery, not the sink.
func wireCongestion() (string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
	if err != nil {
		return "", fmt.Errorf("congestion control: %w", err)
	}
	allowed := strings.Fields(string(b))
	for _, cc := range []string{"cubic", "reno"} {
		if slices.Contains(allowed, cc) {
			return cc, nil
		}
	}
	return "", fmt.Errorf("congestion control: neither cubic nor reno is allowed (tcp_allowed_congestion_control: %s)", bytes.TrimSpace(b))
}

// writeRPS steers the receive work of dev's only queue to cpus
// (CONFIG_RPS; veth has one receive queue unless told otherwise).
func writeRPS(dev string, cpus []int) error {
	p := filepath.Join("/sys/class/net", dev, "queues", "rx-0", "rps_cpus")
	if err := os.WriteFile(p, []byte(CPUMask(cpus)), 0); err != nil {
		return fmt.Errorf("receive packet steering: %w", err)
	}
	return nil
}

// Close removes the namespaces, which takes the veth pair with them, and
// the pair itself if the build stopped before moving it.
func (t *WireTopo) Close() error {
	t.once.Do(func() {
		// Not the caller's context: a run cancelled by a signal still
		// tears its wire down.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var errs []error
		for _, ns := range []string{t.SinkNS, t.LoadNS} {
			if _, err := os.Stat(filepath.Join(NetnsDir, ns)); err != nil {
				continue
			}
			if out, err := exec.CommandContext(ctx, t.IP, "netns", "del", ns).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, bytes.TrimSpace(out)))
			}
		}
		for _, dev := range []string{t.SinkIf, t.LoadIf} {
			if _, err := os.Stat(filepath.Join("/sys/class/net", dev)); err != nil {
				continue
			}
			// Deleting one end of a veth pair deletes both.
			exec.CommandContext(ctx, t.IP, "link", "del", dev).Run()
		}
		if len(errs) > 0 {
			t.closeErr = fmt.Errorf("bench: wire: teardown: %w", errors.Join(errs...))
		}
	})
	return t.closeErr
}

// sweepWires removes the namespaces and veth ends left by bench runs that
// died without tearing down (SIGKILL, a crash in another goroutine): those
// whose creating process is gone.
func sweepWires(ctx context.Context, ip string) {
	gone := func(pid string) bool {
		n, err := strconv.Atoi(pid)
		return err == nil && n != os.Getpid() && unix.Kill(n, 0) == unix.ESRCH
	}
	if ents, err := os.ReadDir(NetnsDir); err == nil {
		for _, e := range ents {
			if m := WireNSRE.FindStringSubmatch(e.Name()); m != nil && m[1] == fmt.Sprintf("%x", PidNamespace()) && gone(m[2]) {
				exec.CommandContext(ctx, ip, "netns", "del", e.Name()).Run()
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			if m := wireLinkRE.FindStringSubmatch(e.Name()); m != nil && gone(m[1]) {
				exec.CommandContext(ctx, ip, "link", "del", e.Name()).Run()
			}
		}
	}
}

// PidNamespace is the inode of this process's PID namespace, 0 if unknown.
func PidNamespace() uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}
