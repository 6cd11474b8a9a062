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
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/srcs"
)

// tailModes are the two ways a Tail waits. With inotify the poll interval
// is an hour, so a test passes only if inotify wakes the tail.
var tailModes = []struct {
	name string
	cfg  srcs.TailConfig
}{
	{"inotify", srcs.TailConfig{Poll: time.Hour}},
	{"poll", srcs.TailConfig{PollOnly: true, Poll: 5 * time.Millisecond}},
}

// forModes runs f once per wait mode, with cfg holding that mode's fields.
func forModes(t *testing.T, f func(t *testing.T, cfg srcs.TailConfig)) {
	for _, m := range tailModes {
		t.Run(m.name, func(t *testing.T) {
			if !m.cfg.PollOnly && runtime.GOOS != "linux" {
				t.Skip("inotify is Linux-only")
			}
			f(t, m.cfg)
		})
	}
}

func newTail(t *testing.T, cfg srcs.TailConfig) *srcs.Tail {
	t.Helper()
	tl, err := srcs.NewTail(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	return tl
}

func openTail(t *testing.T, cfg srcs.TailConfig) *srcs.Tail {
	t.Helper()
	tl := newTail(t, cfg)
	if err := tl.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tl
}

// readN reads exactly n bytes from tl, failing the test if they take
// longer than 10s.
func readN(t *testing.T, tl *srcs.Tail, n int) []byte {
	t.Helper()
	got, err := readNErr(tl, n)
	if err != nil {
		t.Fatalf("after %d of %d bytes (%q): %v", len(got), n, got, err)
	}
	return got
}

// readNErr is readN for goroutines other than the test's.
func readNErr(tl *srcs.Tail, n int) ([]byte, error) {
	if err := tl.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	defer tl.SetReadDeadline(time.Time{})
	got := make([]byte, 0, n)
	for len(got) < n {
		k, err := tl.Read(got[len(got):n])
		got = got[:len(got)+k]
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// expectIdle checks that a Read returns nothing until a short deadline.
func expectIdle(t *testing.T, tl *srcs.Tail) {
	t.Helper()
	tl.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	defer tl.SetReadDeadline(time.Time{})
	if n, err := tl.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %d, %v; want nothing until the deadline", n, err)
	}
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// lines returns count numbered lines starting at from.
func lines(prefix string, from, count int) string {
	var b strings.Builder
	for i := from; i < from+count; i++ {
		fmt.Fprintf(&b, "%s line %06d\n", prefix, i)
	}
	return b.String()
}

func TestTailConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg  srcs.TailConfig
		want string
	}{
		{srcs.TailConfig{}, "Path is empty"},
		{srcs.TailConfig{Path: "x", Poll: -1}, "Poll"},
		{srcs.TailConfig{Path: "x", CheckpointEvery: -1}, "CheckpointEvery"},
	} {
		if _, err := srcs.NewTail(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewTail(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
}

// TestTailFollowsGrowth reads a file as it grows, including bytes
// appended while a Read is blocked at its end.
func TestTailFollowsGrowth(t *testing.T) {
	forModes(t, func(t *testing.T, cfg srcs.TailConfig) {
		path := filepath.Join(t.TempDir(), "log")
		appendFile(t, path, "head\n")
		cfg.Path, cfg.FromStart = path, true
		tl := openTail(t, cfg)
		if tl.Name() != path {
			t.Errorf("Name = %q", tl.Name())
		}
		if got := readN(t, tl, 5); string(got) != "head\n" {
			t.Fatalf("read %q", got)
		}
		expectIdle(t, tl)
		for i := range 20 {
			// A Read blocked at the end wakes for the append.
			done := make(chan []byte, 1)
			go func() {
				got, _ := readNErr(tl, 8)
				done <- got
			}()
			msg := fmt.Sprintf("msg %03d\n", i)
			appendFile(t, path, msg)
			if got := <-done; string(got) != msg {
				t.Fatalf("read %q, want %q", got, msg)
			}
		}
		if pos := tl.Position(); pos.Inode != inode(t, path) || pos.Offset != 5+20*8 {
			t.Errorf("Position = %+v, want offset %d of inode %d", pos, 5+20*8, inode(t, path))
		}
	})
}

// TestTailStartsAtEnd checks that without FromStart or a checkpoint the
// tail skips what the file held at Open.
func TestTailStartsAtEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	appendFile(t, path, "old\n")
	tl := openTail(t, srcs.TailConfig{Path: path, Poll: 5 * time.Millisecond})
	appendFile(t, path, "new\n")
	if got := readN(t, tl, 4); string(got) != "new\n" {
		t.Fatalf("read %q, want only what came after Open", got)
	}
}

// TestTailRotateRename rotates the file by rename several times while a
// writer keeps appending, each rotation also writing to the old file after
// the rename: every byte of each file must arrive once, in order.
func TestTailRotateRename(t *testing.T) {
	forModes(t, func(t *testing.T, cfg srcs.TailConfig) {
		dir := t.TempDir()
		path := filepath.Join(dir, "app.log")
		appendFile(t, path, "")
		logs := make(logRecords, 1024)
		cfg.Path, cfg.FromStart, cfg.Logger = path, true, slog.New(logs)
		tl := openTail(t, cfg)

		const rotations, perFile = 4, 300
		var want strings.Builder
		for r := 0; r <= rotations; r++ {
			want.WriteString(lines(fmt.Sprint("file", r), 0, perFile))
			if r < rotations {
				want.WriteString(lines(fmt.Sprint("late", r), 0, 3))
			}
		}
		type result struct {
			got []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			got, err := readNErr(tl, want.Len())
			done <- result{got, err}
		}()

		w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		for r := 0; r <= rotations; r++ {
			for i := range perFile {
				if i == perFile/2 && r > 0 {
					// Like tail -F, a tail that has not reached a file
					// before it is rotated away again skips it; so let
					// the tail switch, with the new file half written.
					waitLog(t, logs, "rotated")
				}
				if _, err := w.WriteString(lines(fmt.Sprint("file", r), i, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if r == rotations {
				break
			}
			if err := os.Rename(path, fmt.Sprintf("%s.%d", path, r)); err != nil {
				t.Fatal(err)
			}
			// The writer has not reopened yet: these land in the old file.
			w.WriteString(lines(fmt.Sprint("late", r), 0, 3))
			w.Close()
			if w, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		res := <-done
		if res.err != nil {
			t.Fatalf("after %d bytes: %v\n%s", len(res.got), res.err, firstDiff(res.got, []byte(want.String())))
		}
		if string(res.got) != want.String() {
			t.Fatalf("stream differs from the files' bytes in order:\n%s", firstDiff(res.got, []byte(want.String())))
		}
		expectIdle(t, tl)
		if got := tl.Rotations(); got != rotations {
			t.Errorf("Rotations = %d, want %d", got, rotations)
		}
		if pos := tl.Position(); pos.Inode != inode(t, path) {
			t.Errorf("Position %+v is not on the current file (inode %d)", pos, inode(t, path))
		}
	})
}

// waitLog waits up to 10s for a record whose message contains msg.
func waitLog(t *testing.T, logs logRecords, msg string) slog.Record {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r := <-logs:
			if strings.Contains(r.Message, msg) {
				return r
			}
		case <-timeout:
			t.Fatalf("no %q log record in 10s", msg)
		}
	}
}

func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	end := func(b []byte) int { return min(len(b), i+60) }
	return fmt.Sprintf("at byte %d (got %d bytes, want %d):\n got  %q\n want %q", i, len(got), len(want), got[i:end(got)], want[i:end(want)])
}

// TestTailTruncation covers copytruncate (copy, truncate to 0, the writer
// goes on) and truncation to a smaller size: both restart at offset 0,
// are counted and logged.
func TestTailTruncation(t *testing.T) {
	tests := []struct {
		name     string
		keep     int64  // size truncated to
		appended string // written after the truncation
	}{
		{"copytruncate", 0, "after rotation\n"},
		{"shrink", 10, "tail\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forModes(t, func(t *testing.T, cfg srcs.TailConfig) {
				path := filepath.Join(t.TempDir(), "log")
				before := lines("before", 0, 20)
				appendFile(t, path, before)
				logs := make(logRecords, 64)
				cfg.Path, cfg.FromStart, cfg.Logger = path, true, slog.New(logs)
				tl := openTail(t, cfg)
				if got := readN(t, tl, len(before)); string(got) != before {
					t.Fatalf("read %q", got)
				}
				// The writer appends through O_APPEND, as loggers do, so
				// after the truncation it writes at the new end.
				w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if tt.keep == 0 {
					if err := os.WriteFile(path+".1", []byte(before), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Truncate(path, tt.keep); err != nil {
					t.Fatal(err)
				}
				w.WriteString(tt.appended)
				want := before[:tt.keep] + tt.appended
				if got := readN(t, tl, len(want)); string(got) != want {
					t.Fatalf("after truncation read %q, want %q", got, want)
				}
				if got := tl.Truncations(); got != 1 {
					t.Errorf("Truncations = %d, want 1", got)
				}
				if got := tl.Rotations(); got != 0 {
					t.Errorf("Rotations = %d, want 0", got)
				}
				found := false
				for len(logs) > 0 {
					r := <-logs
					if r.Level == slog.LevelInfo && strings.Contains(r.Message, "truncated") {
						found = true
					}
				}
				if !found {
					t.Error("no Info log of the truncation")
				}
			})
		})
	}
}

// TestTailDeletedThenRecreated checks that a deleted file is waited for,
// not reported, and followed from its start when it comes back.
func TestTailDeletedThenRecreated(t *testing.T) {
	forModes(t, func(t *testing.T, cfg srcs.TailConfig) {
		path := filepath.Join(t.TempDir(), "log")
		appendFile(t, path, "first\n")
		cfg.Path, cfg.FromStart = path, true
		tl := openTail(t, cfg)
		readN(t, tl, 6)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		expectIdle(t, tl)
		done := make(chan []byte, 1)
		go func() {
			got, _ := readNErr(tl, 7)
			done <- got
		}()
		appendFile(t, path, "second\n")
		if got := <-done; string(got) != "second\n" {
			t.Fatalf("read %q from the recreated file", got)
		}
		if tl.Rotations() != 1 {
			t.Errorf("Rotations = %d, want 1", tl.Rotations())
		}
	})
}

// TestTailDeadlineAndClose checks the ways out of a Read blocked at the
// end of the file: a deadline set before, one set while it blocks, and
// Close.
func TestTailDeadlineAndClose(t *testing.T) {
	forModes(t, func(t *testing.T, cfg srcs.TailConfig) {
		path := filepath.Join(t.TempDir(), "log")
		appendFile(t, path, "")
		cfg.Path = path
		tl := openTail(t, cfg)

		start := time.Now()
		tl.SetReadDeadline(start.Add(20 * time.Millisecond))
		if _, err := tl.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(driver.Classify(err), srcs.ErrTimeout) {
			t.Fatalf("Read past the deadline = %v, want os.ErrDeadlineExceeded", err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("deadline took %v", el)
		}

		tl.SetReadDeadline(time.Time{})
		for _, how := range []string{"deadline", "close"} {
			done := make(chan error, 1)
			go func() {
				_, err := tl.Read(make([]byte, 8))
				done <- err
			}()
			// The Read fails either way; this only lets it block first.
			time.Sleep(20 * time.Millisecond)
			want := os.ErrDeadlineExceeded
			if how == "close" {
				want = os.ErrClosed
				tl.Close()
			} else {
				tl.SetReadDeadline(time.Now())
			}
			select {
			case err := <-done:
				if !errors.Is(err, want) {
					t.Errorf("%s: Read = %v, want %v", how, err, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s did not unblock Read", how)
			}
			tl.SetReadDeadline(time.Time{})
		}
		if _, err := tl.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after Close = %v, want os.ErrClosed", err)
		}
		if err := tl.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
}

// TestTailReopen checks that a Tail opened again after Close resumes where
// it stopped.
func TestTailReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	appendFile(t, path, "one\n")
	tl := openTail(t, srcs.TailConfig{Path: path, FromStart: true})
	readN(t, tl, 4)
	tl.Close()
	appendFile(t, path, "two\n")
	if err := tl.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tl.Open(context.Background()); err == nil {
		t.Error("second Open succeeded")
	}
	if got := readN(t, tl, 4); string(got) != "two\n" {
		t.Fatalf("after reopening read %q", got)
	}
}

func TestTailOpenErrors(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing", func(t *testing.T) {
		path := filepath.Join(dir, "missing")
		tl := newTail(t, srcs.TailConfig{Path: path})
		err := tl.Open(context.Background())
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Fatalf("Open = %v, want fs.ErrNotExist naming %s", err, path)
		}
		if _, err := tl.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after a failed Open = %v, want os.ErrClosed", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		tl := newTail(t, srcs.TailConfig{Path: dir})
		if err := tl.Open(context.Background()); !errors.Is(err, syscall.EISDIR) {
			t.Fatalf("Open = %v, want EISDIR", err)
		}
	})
	t.Run("permission denied", func(t *testing.T) {
		path := filepath.Join(dir, "secret")
		if err := os.WriteFile(path, []byte("x"), 0o000); err != nil {
			t.Fatal(err)
		}
		tl := newTail(t, srcs.TailConfig{Path: path})
		err := asUnprivileged(func() error { return tl.Open(context.Background()) })
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skip("running as root on a system where a test cannot drop file access")
		}
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), path) {
			t.Fatalf("Open = %v, want fs.ErrPermission naming %s", err, path)
		}
	})
	t.Run("bad checkpoint", func(t *testing.T) {
		path, ck := filepath.Join(dir, "log"), filepath.Join(dir, "ck")
		appendFile(t, path, "x")
		os.WriteFile(ck, []byte("not json"), 0o644)
		tl := newTail(t, srcs.TailConfig{Path: path, Checkpoint: ck})
		if err := tl.Open(context.Background()); err == nil || !strings.Contains(err.Error(), ck) {
			t.Fatalf("Open with a corrupt checkpoint = %v, want an error naming %s", err, ck)
		}
	})
}

// TestTailResumeFromCheckpoint consumes part of a file, releases part of
// that, and restarts: the new tail delivers exactly the bytes after the
// released ones, including those appended while it was down.
func TestTailResumeFromCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path, ck := filepath.Join(dir, "log"), filepath.Join(dir, "log.ckpt")
	data := lines("x", 0, 100)
	appendFile(t, path, data)
	cfg := srcs.TailConfig{Path: path, Checkpoint: ck, FromStart: true, CheckpointEvery: time.Hour}

	tl := openTail(t, cfg)
	readN(t, tl, 1000)
	tl.Released(600)
	tl.Released(500) // counts only grow: ignored
	// Open saved the file's stretch, and nothing since.
	ck0, _ := srcs.NewCheckpoint(ck, "")
	if pos, err := ck0.Load(); err != nil || pos.Offset != 0 {
		t.Fatalf("checkpoint written within CheckpointEvery of the open: %+v, %v", pos, err)
	}
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	c, _ := srcs.NewCheckpoint(ck, "")
	pos, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	if pos.Inode != inode(t, path) || pos.Offset != 600 || pos.File == "" {
		t.Fatalf("checkpoint after Close = %+v, want inode %d, offset 600 and a stretch", pos, inode(t, path))
	}

	appendFile(t, path, "more\n")
	want := data[600:] + "more\n"
	tl2 := openTail(t, cfg)
	if got := readN(t, tl2, len(want)); string(got) != want {
		t.Fatalf("after restart read %s", firstDiff(got, []byte(want)))
	}
	expectIdle(t, tl2)
}

// TestTailCheckpointOtherInode restarts with a checkpoint of a file that
// has been rotated away: the new file is read from its start, even
// without FromStart.
func TestTailCheckpointOtherInode(t *testing.T) {
	dir := t.TempDir()
	path, ck := filepath.Join(dir, "log"), filepath.Join(dir, "ck")
	appendFile(t, path, "fresh file\n")
	c, _ := srcs.NewCheckpoint(ck, path)
	if err := c.Save(srcs.Position{Inode: inode(t, path) + 1, Offset: 5}); err != nil {
		t.Fatal(err)
	}
	tl := openTail(t, srcs.TailConfig{Path: path, Checkpoint: ck})
	if got := readN(t, tl, 11); string(got) != "fresh file\n" {
		t.Fatalf("read %q", got)
	}
	// A checkpoint past the end of its file: truncated while down.
	tl.Close()
	if err := c.Save(srcs.Position{Inode: inode(t, path), Offset: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	tl = openTail(t, srcs.TailConfig{Path: path, Checkpoint: ck})
	if got := readN(t, tl, 11); string(got) != "fresh file\n" {
		t.Fatalf("read %q", got)
	}
	if tl.Truncations() != 1 {
		t.Errorf("Truncations = %d, want 1", tl.Truncations())
	}
}

// TestTailReleasedMapsPositions releases byte counts that end in each
// stretch of a stream spanning a rotation and a truncation, and checks the
// position saved for each.
func TestTailReleasedMapsPositions(t *testing.T) {
	dir := t.TempDir()
	path, ck := filepath.Join(dir, "log"), filepath.Join(dir, "ck")
	appendFile(t, path, strings.Repeat("a", 100))
	old := inode(t, path)
	// A tiny CheckpointEvery: each Released schedules a save at once.
	tl := openTail(t, srcs.TailConfig{Path: path, Checkpoint: ck, FromStart: true, CheckpointEvery: time.Nanosecond})
	readN(t, tl, 100)
	os.Rename(path, path+".1")
	appendFile(t, path, strings.Repeat("b", 50))
	cur := inode(t, path)
	readN(t, tl, 50) // stream bytes 100..150 are file bytes 0..50 of cur
	os.Truncate(path, 0)
	appendFile(t, path, strings.Repeat("c", 30))
	readN(t, tl, 30) // stream bytes 150..180 are 0..30 of cur again

	c, _ := srcs.NewCheckpoint(ck, "")
	stretch := map[int64]string{}
	for _, tt := range []struct {
		released int64
		want     srcs.Position
	}{
		{40, srcs.Position{Inode: old, Offset: 40}},
		{100, srcs.Position{Inode: cur, Offset: 0}},
		{120, srcs.Position{Inode: cur, Offset: 20}},
		{150, srcs.Position{Inode: cur, Offset: 0}},
		{170, srcs.Position{Inode: cur, Offset: 20}},
		{1000, srcs.Position{Inode: cur, Offset: 30}}, // clamped to what was read
	} {
		tl.Released(tt.released)
		if err := tl.Flush(); err != nil {
			t.Fatal(err)
		}
		got, err := c.Load()
		if err != nil {
			t.Fatal(err)
		}
		if got.Inode != tt.want.Inode || got.Offset != tt.want.Offset {
			t.Errorf("Released(%d) saved %+v, want %+v", tt.released, got, tt.want)
		}
		stretch[tt.released] = got.File
	}
	// Each rotation and truncation began a stretch of its own.
	if s := stretch; s[40] == s[100] || s[100] != s[120] || s[120] == s[150] || s[150] != s[170] || s[170] != s[1000] {
		t.Errorf("stretches %v: want one for the old file, one for the new, one after its truncation", s)
	}
}

// TestTailTruncatedRecordNotCheckpointed: a framed session that stopped
// inside a line delivered its start in a chunk flagged Truncated; that
// chunk's bytes are not checkpointed, so a restart delivers the line whole
// once the writer has finished it.
func TestTailTruncatedRecordNotCheckpointed(t *testing.T) {
	dir := t.TempDir()
	path, ck := filepath.Join(dir, "log"), filepath.Join(dir, "ck")
	appendFile(t, path, "one\ntwo\nthree\nhal")
	cfg := srcs.TailConfig{Path: path, Checkpoint: ck, FromStart: true, CheckpointEvery: time.Hour}
	tl := openTail(t, cfg)
	readN(t, tl, 17)
	// As a runner framing by newline would deliver the file, stopped.
	tl.Delivered([]byte("one\n"), srcs.Records)
	tl.Delivered([]byte("two\nthree\nhal"), srcs.Records|srcs.Truncated)
	c, _ := srcs.NewCheckpoint(ck, "")
	for _, tt := range []struct {
		released int64
		want     int64
	}{
		{4, 4},
		{17, 4}, // the Truncated chunk, released: its start
	} {
		tl.Released(tt.released)
		if err := tl.Flush(); err != nil {
			t.Fatal(err)
		}
		if pos, err := c.Load(); err != nil || pos.Offset != tt.want {
			t.Errorf("Released(%d) saved %+v (%v), want offset %d", tt.released, pos, err, tt.want)
		}
	}
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "f\n")
	want := "two\nthree\nhalf\n"
	if got := readN(t, openTail(t, cfg), len(want)); string(got) != want {
		t.Fatalf("after the restart read %q, want %q", got, want)
	}
}

// TestTailReleasedConcurrent releases from several goroutines while the
// tail reads, for the race detector, and checks the final checkpoint.
func TestTailReleasedConcurrent(t *testing.T) {
	dir := t.TempDir()
	path, ck := filepath.Join(dir, "log"), filepath.Join(dir, "ck")
	data := bytes.Repeat([]byte("0123456789"), 1000)
	appendFile(t, path, string(data))
	tl := openTail(t, srcs.TailConfig{Path: path, Checkpoint: ck, FromStart: true, CheckpointEvery: time.Millisecond})
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for n := int64(g); n <= int64(len(data)); n += 97 {
				tl.Released(n)
			}
		}()
	}
	readN(t, tl, len(data))
	for range 4 {
		<-done
	}
	tl.Released(int64(len(data)))
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	c, _ := srcs.NewCheckpoint(ck, "")
	pos, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	if pos.Offset != int64(len(data)) {
		t.Errorf("final checkpoint %+v, want offset %d", pos, len(data))
	}
}

// TestTailStretchesSurviveRestart: a tail restarted on a checkpoint whose
// position lies in a file rotated away since finishes that file first,
// from the checkpoint, then reads the file now at the path, and gives
// every byte it reads again the stretch and offset it had before
// (PositionAt), which a message id made of them needs; a truncation
// begins a stretch of its own.
func TestTailStretchesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	path, ck := filepath.Join(dir, "app.log"), filepath.Join(dir, "app.ckpt")
	first, second := lines("a", 0, 5), lines("b", 0, 3)
	appendFile(t, path, first)
	cfg := srcs.TailConfig{Path: path, Checkpoint: ck, FromStart: true, CheckpointEvery: time.Hour, PollOnly: true, Poll: 5 * time.Millisecond}

	at := func(tl *srcs.Tail, n int64) srcs.Position {
		t.Helper()
		p, ok := tl.PositionAt(n)
		if !ok {
			t.Fatalf("PositionAt(%d): unknown", n)
		}
		return p
	}
	tl := openTail(t, cfg)
	readN(t, tl, len(first))
	a0 := at(tl, 0)
	tl.Released(40)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, second)
	if got := string(readN(t, tl, len(second))); got != second {
		t.Fatalf("after the rotation: %q", got)
	}
	b0 := at(tl, int64(len(first)))
	if b0.File == a0.File || b0.Offset != 0 || a0.Offset != 0 {
		t.Fatalf("stretches %+v and %+v", a0, b0)
	}
	if err := tl.Close(); err != nil { // the checkpoint stays at 40 of the old file
		t.Fatal(err)
	}

	tl2 := openTail(t, cfg)
	want := first[40:] + second
	if got := string(readN(t, tl2, len(want))); got != want {
		t.Fatalf("after the restart: %q, want %q", got, want)
	}
	if p := at(tl2, 0); p.File != a0.File || p.Offset != 40 {
		t.Errorf("the old file again at %+v, want %s at 40", p, a0.File)
	}
	if p := at(tl2, int64(len(first)-40)); p != b0 {
		t.Errorf("the new file again at %+v, want %+v", p, b0)
	}

	// A truncation while it reads: the file's text is new, and so is its stretch.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "c\n")
	if got := string(readN(t, tl2, 2)); got != "c\n" {
		t.Fatalf("after the truncation: %q", got)
	}
	if p := at(tl2, int64(len(want))); p.File == b0.File || p.Offset != 0 || p.Inode != b0.Inode {
		t.Errorf("after the truncation at %+v, want a new stretch of inode %d", p, b0.Inode)
	}
}
