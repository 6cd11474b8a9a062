package srcs_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/srcs"
)

// TestCheckpointRoundTrip saves positions and loads them back, and checks
// that each Save replaced the file whole and left no temporary file.
func TestCheckpointRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.ckpt")
	c, err := srcs.NewCheckpoint(path, "/var/log/app.log")
	if err != nil {
		t.Fatal(err)
	}
	if c.Path() != path {
		t.Errorf("Path = %q", c.Path())
	}
	if _, err := c.Load(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load before any Save = %v, want fs.ErrNotExist", err)
	}
	for _, pos := range []srcs.Position{
		{Inode: 1234, Offset: 5678},
		{Inode: 1234, Offset: 0},
		{Inode: 1<<63 + 7, Offset: 1<<62 + 3}, // full 64-bit range survives JSON
	} {
		if err := c.Save(pos); err != nil {
			t.Fatal(err)
		}
		got, err := c.Load()
		if err != nil {
			t.Fatal(err)
		}
		if got != pos {
			t.Errorf("Load = %+v, want %+v", got, pos)
		}
		// The file is the checkpoint alone, readable by people.
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("checkpoint file is not one JSON document: %q: %v", raw, err)
		}
		if doc["path"] != "/var/log/app.log" || doc["version"] != 2.0 {
			t.Errorf("checkpoint file %s lacks its path or version", raw)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "app.ckpt" {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("directory holds %v, want only app.ckpt (a temporary file left behind?)", names)
		}
	}
}

func TestCheckpointErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := srcs.NewCheckpoint("", ""); err == nil {
		t.Error("NewCheckpoint with no path succeeded")
	}
	for _, tt := range []struct {
		name, content, want string
	}{
		{"garbage", "offset=5", "invalid character"},
		{"version", `{"version":9,"inode":1,"offset":2}`, "version 9"},
		{"negative", `{"version":1,"inode":1,"offset":-2}`, "negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			os.WriteFile(path, []byte(tt.content), 0o644)
			c, _ := srcs.NewCheckpoint(path, "")
			_, err := c.Load()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load = %v, want an error naming %s and %q", err, path, tt.want)
			}
			var ce *srcs.CheckpointError
			if !errors.As(err, &ce) || ce.Path != path || ce.Op != "load" {
				t.Errorf("Load = %#v, want a *srcs.CheckpointError loading %s", err, path)
			}
		})
	}
	t.Run("unwritable directory", func(t *testing.T) {
		path := filepath.Join(dir, "missing", "ck")
		c, _ := srcs.NewCheckpoint(path, "/var/log/app.log")
		err := c.Save(srcs.Position{})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Save into a missing directory = %v, want fs.ErrNotExist", err)
		}
		var ce *srcs.CheckpointError
		if !errors.As(err, &ce) || ce.Path != path || ce.Source != "/var/log/app.log" || ce.Op != "save" {
			t.Fatalf("Save = %#v, want a *srcs.CheckpointError saving %s", err, path)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "srcs: checkpoint "+path+" (of /var/log/app.log): save: ") {
			t.Errorf("error %q does not start with the package, the checkpoint and its file", msg)
		}
	})
	t.Run("failed save keeps the old checkpoint", func(t *testing.T) {
		// A directory in the way makes the rename fail after the
		// temporary file was written and synced.
		path := filepath.Join(dir, "blocked")
		if err := os.MkdirAll(filepath.Join(path, "child"), 0o755); err != nil {
			t.Fatal(err)
		}
		c, _ := srcs.NewCheckpoint(path, "")
		if err := c.Save(srcs.Position{Inode: 1, Offset: 1}); err == nil {
			t.Fatal("Save over a non-empty directory succeeded")
		}
		matches, _ := filepath.Glob(filepath.Join(dir, ".blocked.*"))
		if len(matches) != 0 {
			t.Errorf("temporary files left after a failed save: %v", matches)
		}
	})
}

// TestCheckpointRemovesLeftoverTemps: a process killed during a save
// leaves its temporary file; the next Checkpoint's first Save removes such
// files, and only those, so that crashes cannot fill a small disk.
func TestCheckpointRemovesLeftoverTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.ckpt")
	leftovers := []string{".app.ckpt.123.tmp", ".app.ckpt.4294967295.tmp"}
	kept := []string{".app.ckpt.x1.tmp", ".app.ckpt..tmp", ".other.ckpt.123.tmp", "app.ckpt.123.tmp"}
	for _, name := range append(leftovers, kept...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"version":1,"inode":1,"offset":9`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := srcs.NewCheckpoint(path, "")
	if err := c.Save(srcs.Position{Inode: 1, Offset: 2}); err != nil {
		t.Fatal(err)
	}
	for _, name := range leftovers {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("leftover %s still there (%v)", name, err)
		}
	}
	for _, name := range kept {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s, not a temporary file of app.ckpt, was removed: %v", name, err)
		}
	}
	if pos, err := c.Load(); err != nil || pos != (srcs.Position{Inode: 1, Offset: 2}) {
		t.Errorf("Load = %+v, %v", pos, err)
	}
}
