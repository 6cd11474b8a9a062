package engine_test

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/ring"
)

func init() { faultChildren["nouring"] = faultChildNoURing }

// A process cannot be denied io_uring by this repository's code with a
// seccomp filter: installing one on every thread needs seccomp(2) with
// SECCOMP_FILTER_FLAG_TSYNC, a raw system call taking a pointer, and the
// lint rules keep raw system calls and unsafe in ring/, whose job is
// io_uring, not sandboxing. So the test uses the kernel's own switch
// (Linux 6.6): kernel.io_uring_disabled=1 denies io_uring_setup(2) with
// EPERM to processes without CAP_SYS_ADMIN (and outside
// kernel.io_uring_group), and the child runs under an unprivileged user.
// Processes running as root, such as other tests, keep io_uring meanwhile.
// The sysctl comes back as soon as the child exits, and at cleanup.
const ioURingDisabled = "/proc/sys/kernel/io_uring_disabled"

// ioURingLock serialises, across processes, the tests that change
// kernel.io_uring_disabled (exclusively) with those whose unprivileged
// children need io_uring (shared), so that concurrent runs of the suite
// on one machine cannot see each other's setting.
const ioURingLock = "/tmp/sluice-fault-io_uring_disabled.lock"

func lockIOURingSysctl(t *testing.T, how int) {
	t.Helper()
	f, err := os.OpenFile(ioURingLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing drops the lock
}

// TestFaultNoURing runs an engine where io_uring_setup(2) is denied: Runner
// "auto" must fall back to epoll and say why, and streams, a file and a
// framed stream must still arrive byte-exact.
func TestFaultNoURing(t *testing.T) {
	requireRunner(t, engine.RunnerURing) // the test is that it goes missing
	uid := childUser(t, 1)
	if _, err := os.Stat(ioURingDisabled); err != nil {
		t.Skipf("no kernel.io_uring_disabled (Linux 6.6) to deny io_uring with: %v", err)
	}
	lockIOURingSysctl(t, unix.LOCK_EX)
	orig, err := os.ReadFile(ioURingDisabled)
	if err != nil {
		t.Fatal(err)
	}
	restore := sync.OnceFunc(func() {
		if err := os.WriteFile(ioURingDisabled, orig, 0o644); err != nil {
			t.Errorf("restoring kernel.io_uring_disabled=%s: %v", bytes.TrimSpace(orig), err)
		}
	})
	t.Cleanup(restore)
	if strings.TrimSpace(string(orig)) == "0" {
		if err := os.WriteFile(ioURingDisabled, []byte("1"), 0o644); err != nil {
			t.Fatalf("setting kernel.io_uring_disabled=1: %v", err)
		}
	}
	out := func() string {
		defer restore()
		return runChild(t, childConfig{mode: "nouring", uid: uid, tmp: childTmp(t, uid)})
	}()
	if got, _ := os.ReadFile(ioURingDisabled); !bytes.Equal(got, orig) {
		t.Fatalf("kernel.io_uring_disabled is %s after the test, was %s", bytes.TrimSpace(got), bytes.TrimSpace(orig))
	}
	for _, want := range []string{"auto chose epoll", "kernel.io_uring_disabled", "streams byte-exact", "file byte-exact", "framed byte-exact"} {
		if !strings.Contains(out, want) {
			t.Errorf("the child never said %q", want)
		}
	}
}

func faultChildNoURing(t *testing.T) {
	p := ring.Probe()
	if p.Supported {
		t.Fatalf("io_uring works in the child (uid %d): nothing to test", os.Getuid())
	}
	t.Logf("probe: %s", p.Reason)
	tap := newLogTap()
	e, col := startEngine(t, engine.Config{Workers: 2, Buffers: 128, BufSize: 16 << 10}, tap)
	if e.Runner() != engine.RunnerEpoll {
		t.Fatalf("auto chose %s without io_uring, want epoll", e.Runner())
	}
	skipped := tap.waitFor(t, "why io_uring was skipped", time.Second, func(r logRec) bool {
		return r.msg == "runner skipped" && strings.Contains(r.attrs, "runner=uring")
	})
	if !strings.Contains(skipped.attrs, "kernel.io_uring_disabled") {
		t.Errorf("the log says io_uring was skipped, but not why: %s", skipped)
	}
	tap.waitFor(t, "the choice", time.Second, func(r logRec) bool {
		return r.msg == "runner chosen" && strings.Contains(r.attrs, "runner=epoll") && strings.Contains(r.attrs, "reason=auto")
	})
	t.Logf("auto chose epoll: %s", skipped)
	checkStreams(t, e, col, 16, 256<<10)
	t.Log("streams byte-exact")
	checkFile(t, e, col, 8<<20)
	t.Log("file byte-exact")
	checkNewlineStream(t, engine.Config{Workers: 1, Buffers: 64, BufSize: 16 << 10}, tap, 4<<20)
	t.Log("framed byte-exact")
}
