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

// TestFaultMemlock runs the uring runner under a small RLIMIT_MEMLOCK. The
// limit binds only without CAP_IPC_LOCK, so the child runs under an
// unprivileged user, as a service would. The runner registers no buffers
// (the pool is read into as plain memory), but recent kernels (6.18 does)
// charge the rings themselves against the limit, per user and across
// processes: a worker's rings (512 SQEs, 4,096 CQEs) take over 100 KiB.
// The child checks:
//
//   - 512 KiB, a 4 MiB pool: the runner starts, and streams and a file
//     arrive byte-exact;
//   - 64 KiB: Runner "uring" fails with ENOMEM (or, on a kernel that does
//     not charge the rings, starts), and "auto" falls back to epoll,
//     logging why.
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
	for _, want := range []string{"streams byte-exact", "file byte-exact", "under 64 KiB"} {
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
	// Enough for one worker's rings, far less than the pool. The probe's
	// ring (cached for the process) is made under this limit too.
	setMemlock(t, 512<<10)
	t.Run("512KiB", func(t *testing.T) {
		tap := newLogTap()
		e, col := startEngine(t, engine.Config{Runner: engine.RunnerURing, Workers: 1, Buffers: buffers, BufSize: bufSize}, tap)
		if e.Runner() != engine.RunnerURing {
			t.Fatalf("chose %s", e.Runner())
		}
		checkStreams(t, e, col, 8, 512<<10)
		t.Log("streams byte-exact")
		checkFile(t, e, col, 16<<20)
		t.Log("file byte-exact")
	})

	setMemlock(t, 64<<10)
	t.Run("64KiB", func(t *testing.T) {
		tap := newLogTap()
		e, err := engine.New(engine.Config{Runner: engine.RunnerURing, Workers: 1, Buffers: buffers, BufSize: bufSize},
			engine.WithLogger(slog.New(tap)))
		if err == nil {
			// A kernel that does not charge the rings: the runner starts.
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
