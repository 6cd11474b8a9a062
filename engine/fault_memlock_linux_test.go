package engine_test

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/engine"
)

func init() { faultChildren["memlock"] = faultChildMemlock }

// TestFaultMemlock runs the uring runner under an RLIMIT_MEMLOCK too small
// for the pool's slab. The limit binds only without CAP_IPC_LOCK (as root,
// registering 4 MiB under a 64 KiB limit succeeds), so the child runs under
// an unprivileged user, as a service would. What the kernel charges
// against the limit, per user and across processes, is every registered
// buffer and, on recent kernels (6.18 does), the rings themselves: a
// worker's rings (512 SQEs, 4,096 CQEs) take over 100 KiB, so under
// 64 KiB the runner cannot start at all, and under 512 KiB it starts but
// cannot register the slab. The child checks both:
//
//   - 512 KiB, a 4 MiB slab: the worker reads with plain READ instead of
//     READ_FIXED, the log says "fixed buffers unavailable" naming the
//     limit, and streams and a file arrive byte-exact;
//   - 64 KiB: Runner "uring" fails with ENOMEM (or, on a kernel that does
//     not charge the rings, starts without fixed buffers), and "auto"
//     falls back to epoll, logging why.
func TestFaultMemlock(t *testing.T) {
	requireRunner(t, engine.RunnerURing)
	uid := childUser(t, 2)
	// The child needs io_uring as an unprivileged user: keep
	// TestFaultNoURing, here or in another process, from denying it.
	lockIOURingSysctl(t, unix.LOCK_SH)
	if b, err := os.ReadFile(ioURingDisabled); err == nil && strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("kernel.io_uring_disabled=%s denies io_uring to the unprivileged child", strings.TrimSpace(string(b)))
	}
	out := runChild(t, childConfig{mode: "memlock", uid: uid, tmp: childTmp(t, uid)})
	for _, want := range []string{"fixed buffers unavailable", "streams byte-exact", "file byte-exact", "under 64 KiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("the child never said %q", want)
		}
	}
}

func setMemlock(t *testing.T, n uint64) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = n
	lim.Max = max(lim.Max, n)
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
}

func faultChildMemlock(t *testing.T) {
	const (
		bufSize = 64 << 10
		buffers = 64 // a 4 MiB slab
	)
	// Enough for one worker's rings, not for the slab. The probe's ring
	// (cached for the process) is made under this limit too.
	setMemlock(t, 512<<10)
	t.Run("512KiB", func(t *testing.T) {
		tap := newLogTap()
		e, col := startEngine(t, engine.Config{Runner: engine.RunnerURing, Workers: 1, Buffers: buffers, BufSize: bufSize}, tap)
		if e.Runner() != engine.RunnerURing {
			t.Fatalf("chose %s", e.Runner())
		}
		checkStreams(t, e, col, 8, 512<<10)
		t.Log("streams byte-exact")
		// The worker registers the slab when it is first given a file:
		// the fallback is logged then.
		checkFile(t, e, col, 16<<20)
		t.Log("file byte-exact (READ, not READ_FIXED)")
		r := tap.waitFor(t, "the fixed-buffer fallback", time.Second, func(r logRec) bool {
			return strings.Contains(r.msg, "fixed buffers unavailable")
		})
		if !strings.Contains(r.attrs, "RLIMIT_MEMLOCK 524288 bytes") {
			t.Errorf("the fallback's log does not name the limit: %s", r)
		}
		t.Logf("logged: %s", r)
	})

	setMemlock(t, 64<<10)
	t.Run("64KiB", func(t *testing.T) {
		tap := newLogTap()
		e, err := engine.New(engine.Config{Runner: engine.RunnerURing, Workers: 1, Buffers: buffers, BufSize: bufSize},
			engine.WithLogger(slog.New(tap)))
		if err == nil {
			// A kernel that does not charge the rings: the runner starts,
			// and the slab, registered for the first file, will not fit
			// (the 512 KiB case shows that fallback).
			e.Shutdown(t.Context())
			t.Log("under 64 KiB: the runner starts")
			return
		}
		if !errors.Is(err, unix.ENOMEM) {
			t.Fatalf("Runner uring under 64 KiB of RLIMIT_MEMLOCK: %v; want ENOMEM", err)
		}
		t.Logf("under 64 KiB: Runner uring fails: %v", err)
		e, col := startEngine(t, engine.Config{Workers: 1, Buffers: buffers, BufSize: bufSize}, tap)
		if e.Runner() != engine.RunnerEpoll {
			t.Fatalf("auto chose %s, want epoll", e.Runner())
		}
		r := tap.waitFor(t, "why auto skipped io_uring", time.Second, func(r logRec) bool {
			return r.msg == "runner skipped" && strings.Contains(r.attrs, "runner=uring")
		})
		if !strings.Contains(r.attrs, "cannot allocate memory") {
			t.Errorf("the log does not say why: %s", r)
		}
		t.Logf("auto: %s", r)
		checkStreams(t, e, col, 4, 256<<10)
	})
}
