package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Some fault tests change what a whole process may do (its descriptor or
// locked-memory limits, its privileges), so they run their body in a
// child: the test binary again, told by faultChildEnv which body to run
// through TestFaultChild. The parent's limits and privileges stay as they
// were, and the parent judges the child by its exit status and output.

const (
	faultChildEnv  = "SLUICE_FAULT_CHILD"  // the child body to run
	faultRunnerEnv = "SLUICE_FAULT_RUNNER" // the runner it tests
)

// faultChildren are the bodies a child can run, by name.
var faultChildren = map[string]func(t *testing.T){}

// TestFaultChild runs the child body named by SLUICE_FAULT_CHILD. In a
// normal test run the variable is unset and there is nothing to do.
func TestFaultChild(t *testing.T) {
	mode := os.Getenv(faultChildEnv)
	if mode == "" {
		return
	}
	body := faultChildren[mode]
	if body == nil {
		t.Fatalf("unknown %s=%q", faultChildEnv, mode)
	}
	body(t)
}

// childConfig says how to start a child.
type childConfig struct {
	mode    string
	env     []string
	timeout time.Duration
	// uid, when non-zero, runs the child under that user and group with
	// no supplementary groups, which drops every capability (the parent
	// must be root). The child starts in / and must keep its files in the
	// TMPDIR it is given.
	uid uint32
	tmp string
}

// runChild runs the test binary as a child and returns its output; it
// fails the test if the child fails. The child's output is logged either
// way.
func runChild(t *testing.T, cfg childConfig) string {
	t.Helper()
	if cfg.timeout == 0 {
		cfg.timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	// /proc/self/exe names the test binary without a path that an
	// unprivileged child would need permission to walk.
	cmd := exec.CommandContext(ctx, "/proc/self/exe", "-test.run=^TestFaultChild$", "-test.v", "-test.count=1",
		"-test.timeout="+cfg.timeout.String())
	cmd.Env = append(slices.Clone(os.Environ()), faultChildEnv+"="+cfg.mode, "SLUICE_RUNNER=")
	cmd.Env = append(cmd.Env, cfg.env...)
	// A race-enabled binary otherwise sleeps a second before it exits.
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Dir = "/"
	cmd.WaitDelay = 5 * time.Second
	if cfg.uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: cfg.uid, Gid: cfg.uid, Groups: []uint32{}}}
	}
	if cfg.tmp != "" {
		cmd.Env = append(cmd.Env, "TMPDIR="+cfg.tmp)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("child %s (%v):\n%s", cfg.mode, time.Since(start).Round(time.Millisecond), indent(out.String()))
	if err != nil {
		t.Fatalf("child %s: %v", cfg.mode, err)
	}
	if !strings.Contains(out.String(), "--- PASS: TestFaultChild") {
		t.Fatalf("child %s did not report a pass", cfg.mode)
	}
	return out.String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// childUser returns a user and group id that no other process uses, for
// a child that must run unprivileged. The kernel charges io_uring's locked
// memory to the user, across processes, and releases a closed ring's
// share asynchronously: a shared id such as nobody's would make a child's
// allowance depend on what other processes did just before.
func childUser(t *testing.T, n int) uint32 {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child under an unprivileged user")
	}
	slot := uint64(os.Getpid()%(1<<16))*8 + uint64(n)
	ids := []uint64{2_000_000_000 + slot} // in the initial user namespace
	// In a user namespace, take one near the top of its largest range.
	if start, count := largestIDRange(t, "/proc/self/uid_map"); count > 4096 {
		ids = append(ids, start+count-2-slot%(count/2))
	}
	for _, id := range ids {
		if idMapped(t, "/proc/self/uid_map", id) && idMapped(t, "/proc/self/gid_map", id) {
			return uint32(id)
		}
	}
	t.Fatalf("no unused user and group id mapped in this user namespace (tried %v)", ids)
	return 0
}

// idRanges reads a uid_map or gid_map: the ids seen here, as start and
// count.
func idRanges(t *testing.T, path string) [][2]uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]uint64
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var inside, outside, count uint64
		if _, err := fmt.Sscan(line, &inside, &outside, &count); err != nil {
			t.Fatalf("%s: %q: %v", path, line, err)
		}
		out = append(out, [2]uint64{inside, count})
	}
	return out
}

func largestIDRange(t *testing.T, path string) (start, count uint64) {
	for _, r := range idRanges(t, path) {
		if r[1] > count {
			start, count = r[0], r[1]
		}
	}
	return start, count
}

func idMapped(t *testing.T, path string, id uint64) bool {
	for _, r := range idRanges(t, path) {
		if id >= r[0] && id-r[0] < r[1] && id != 1<<32-1 {
			return true
		}
	}
	return false
}

// childTmp makes a TMPDIR that the child's user owns; the parent removes
// it.
func childTmp(t *testing.T, uid uint32) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-fault-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(uid), int(uid)); err != nil {
		t.Fatal(err)
	}
	return dir
}
