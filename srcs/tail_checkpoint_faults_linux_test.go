package srcs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// underCI says whether a test that cannot set up its fault must fail
// rather than skip: CI runs as root with CI=true, and the Makefile sets
// SLUICE_REQUIRE_URING=1 there.
func underCI() bool {
	return os.Getenv("CI") == "true" || srcstest.Required(srcstest.EnvRequireURing)
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted
// when the test ends. Mounting needs root; a test not running as root
// skips, unless under CI, where it fails.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if underCI() {
			t.Fatal("under CI (CI=true or SLUICE_REQUIRE_URING=1) but not root: this fault test mounts a tmpfs")
		}
		t.Skip("not root: this fault test mounts a tmpfs (CI runs it as root)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mount -t tmpfs -o size=%d tmpfs %s: %v (root without CAP_SYS_ADMIN?)", size, dir, err)
	}
	// Registered after TempDir's cleanup, so it runs before the removal.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the file system is full, and returns
// a function that removes it.
func fillDisk(t *testing.T, dir string) func() {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1024)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
			}
			break
		}
	}
	return func() {
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
}

// remountReadOnly remounts the tmpfs at dir read-only, and returns a
// function that makes it writable again.
func remountReadOnly(t *testing.T, dir string) func() {
	t.Helper()
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("mount -o remount,ro %s: %v", dir, err)
	}
	return func() {
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT, ""); err != nil {
			t.Fatalf("mount -o remount,rw %s: %v", dir, err)
		}
	}
}

// TestTailCheckpointFaults makes the checkpoint's file system refuse
// writes while a tail delivers: full (ENOSPC) or read-only (EROFS). The
// failing saves are reported as a *srcs.CheckpointError, and at Warn once
// per run of failures; the file keeps the last good position byte for
// byte, and no temporary file is left; delivery goes on; a restart during
// the fault resumes from the last good position and loses nothing; once
// the file system takes writes again, the retried save records the newest
// released position with no further data. Throughout, the saved offset is
// never beyond the released bytes.
func TestTailCheckpointFaults(t *testing.T) {
	for _, tt := range []struct {
		name   string
		errno  syscall.Errno
		inject func(t *testing.T, dir string) (undo func())
	}{
		{"disk full", syscall.ENOSPC, fillDisk},
		{"read-only", syscall.EROFS, remountReadOnly},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := mountTmpfs(t, 16<<10)
			ck := filepath.Join(dir, "app.log.ckpt")
			path := filepath.Join(t.TempDir(), "app.log")
			data := lines("app", 0, 400) // 400 lines of 16 bytes
			const lineLen = 16
			line := func(i int) int64 { return int64(i * lineLen) }
			appendFile(t, path, data[:line(100)])

			logs := make(logRecords, 1024)
			var warns atomic.Int64
			cfg := srcs.TailConfig{Path: path, Checkpoint: ck, FromStart: true,
				CheckpointEvery: 10 * time.Millisecond, Logger: slog.New(warnCounter{logs, &warns})}
			tl := openTail(t, cfg)
			c, _ := srcs.NewCheckpoint(ck, "")

			var released int64
			// release acknowledges the first n lines, which must have
			// been read, and checks that the file on disk is not ahead.
			release := func(n int) {
				t.Helper()
				released = line(n)
				tl.Released(released)
				pos, err := c.Load()
				switch {
				case errors.Is(err, fs.ErrNotExist): // not saved yet
				case err != nil:
					t.Fatalf("checkpoint unreadable: %v", err)
				case pos.Offset > released:
					t.Fatalf("checkpoint at offset %d, beyond the %d bytes released", pos.Offset, released)
				}
			}

			// Before the fault: a good checkpoint at line 60.
			readN(t, tl, int(line(100)))
			release(60)
			if err := tl.Flush(); err != nil {
				t.Fatal(err)
			}
			good, err := os.ReadFile(ck)
			if err != nil {
				t.Fatal(err)
			}
			if pos, err := c.Load(); err != nil || pos.Offset != line(60) {
				t.Fatalf("checkpoint before the fault: %+v, %v; want offset %d", pos, err, line(60))
			}

			undo := tt.inject(t, dir)
			// Delivery goes on, and every release tries a save.
			appendFile(t, path, data[line(100):line(300)])
			for i := 100; i < 300; i += 20 {
				if got := readN(t, tl, int(line(20))); !bytes.Equal(got, []byte(data[line(i):line(i+20)])) {
					t.Fatalf("during the fault read %s", firstDiff(got, []byte(data[line(i):line(i+20)])))
				}
				release(i + 10)
			}
			warn := waitLog(t, logs, "saving the checkpoint failed")
			if warn.Level != slog.LevelWarn {
				t.Errorf("first failed save logged at %v, want Warn", warn.Level)
			}
			err = tl.Flush()
			var ce *srcs.CheckpointError
			if !errors.As(err, &ce) || ce.Path != ck || ce.Op != "save" || !errors.Is(err, tt.errno) {
				t.Fatalf("Flush during the fault = %v, want a *srcs.CheckpointError saving %s, wrapping %v", err, ck, tt.errno)
			}
			if !strings.Contains(err.Error(), ck) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the checkpoint and the tailed file", err)
			}
			if err := tl.CheckpointErr(); !errors.Is(err, tt.errno) {
				t.Errorf("CheckpointErr during the fault = %v, want %v", err, tt.errno)
			}
			if now, err := os.ReadFile(ck); err != nil || !bytes.Equal(now, good) {
				t.Fatalf("checkpoint file during the fault is %q (%v), want the last good one %q", now, err, good)
			}
			for _, e := range readDirNames(t, dir) {
				if e != "app.log.ckpt" && e != "filler" {
					t.Errorf("%s left in the checkpoint's directory", e)
				}
			}

			// A restart now resumes from the last good position: the
			// lines released since come again, none is missing.
			tl2 := openTail(t, srcs.TailConfig{Path: path, Checkpoint: ck, PollOnly: true})
			if got := readN(t, tl2, int(line(300-60))); !bytes.Equal(got, []byte(data[line(60):line(300)])) {
				t.Fatalf("restarted during the fault, read %s", firstDiff(got, []byte(data[line(60):line(300)])))
			}
			if err := tl2.Close(); err != nil {
				t.Fatalf("closing a tail that released nothing: %v", err)
			}

			// The fault ends. Without more releases, the retried save
			// catches up with the newest released position.
			undo()
			waitLog(t, logs, "checkpoint saved again")
			if pos, err := c.Load(); err != nil || pos.Offset != released {
				t.Fatalf("checkpoint after the fault: %+v, %v; want offset %d", pos, err, released)
			}
			if err := tl.CheckpointErr(); err != nil {
				t.Errorf("CheckpointErr after a good save = %v", err)
			}
			if n := warns.Load(); n != 1 {
				t.Errorf("%d Warn records for one run of failed saves, want 1", n)
			}

			// Later saves succeed; a restart resumes after the released
			// bytes, exactly.
			appendFile(t, path, data[line(300):])
			readN(t, tl, int(line(100)))
			release(350)
			if err := tl.Close(); err != nil {
				t.Fatal(err)
			}
			if pos, err := c.Load(); err != nil || pos.Offset != line(350) {
				t.Fatalf("checkpoint after Close: %+v, %v; want offset %d", pos, err, line(350))
			}
			tl3 := openTail(t, srcs.TailConfig{Path: path, Checkpoint: ck, PollOnly: true})
			if got := readN(t, tl3, int(line(50))); !bytes.Equal(got, []byte(data[line(350):])) {
				t.Fatalf("after the restart read %s", firstDiff(got, []byte(data[line(350):])))
			}
			expectIdle(t, tl3)
		})
	}
}

// warnCounter is a logRecords handler that also counts Warn records. It
// leaves out Debug records, such as one per retried save.
type warnCounter struct {
	logRecords
	warns *atomic.Int64
}

func (h warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		h.warns.Add(1)
	}
	return h.logRecords.Handle(ctx, r)
}

func (h warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnCounter) WithGroup(string) slog.Handler      { return h }

func readDirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
