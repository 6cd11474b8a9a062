package srcs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Position is a place in a followed file: the file's device and inode, the
// identity of the stretch of it being read, and a byte offset. The inode
// tells a rotated file from its replacement at the same path; the stretch
// tells apart what one inode held before and after a truncation, or
// before and after the inode was given to another file.
type Position struct {
	Dev   uint64 `json:"dev,omitempty"`
	Inode uint64 `json:"inode"`
	// File names the stretch: a random identity a Tail gives each file it
	// begins to read, and again after each truncation, and keeps in its
	// checkpoint, so that what it reads again after a restart has the
	// identity it had. Empty in a checkpoint of an older version.
	File   string `json:"file,omitempty"`
	Offset int64  `json:"offset"`
}

// checkpointFile is what a checkpoint file holds, as JSON. Path is there
// for people reading the file; Load ignores it. Files are the stretches
// the tail has begun from Position's on, oldest first, each with the
// offset it began at.
type checkpointFile struct {
	Version int    `json:"version"`
	Path    string `json:"path,omitempty"`
	Position
	Files []Position `json:"files,omitempty"`
}

const checkpointVersion = 2

// Checkpoint is a file that remembers a Position across restarts. Save
// replaces it atomically and durably: it writes a temporary file in the
// same directory, fsyncs it, renames it over the checkpoint and fsyncs the
// directory, so after a crash the file holds either the old position or
// the new one, never a torn mix.
//
// A Checkpoint is safe for concurrent use; concurrent Saves are
// serialised, and the last one to run wins. It must be the only writer of
// its file: two processes, or two Checkpoints, saving the same path may
// remove each other's temporary files.
type Checkpoint struct {
	path string
	// source is recorded in the file for whoever reads it.
	source string

	mu    sync.Mutex // serialises Save, so temporary files never race
	swept bool       // leftover temporary files removed; guarded by mu
}

// NewCheckpoint returns the checkpoint kept in the file at path, for the
// followed file named source (recorded for people; may be empty). It does
// not touch the file system.
func NewCheckpoint(path, source string) (*Checkpoint, error) {
	if path == "" {
		return nil, errors.New("srcs: checkpoint: path is empty")
	}
	return &Checkpoint{path: path, source: source}, nil
}

// Path returns the checkpoint file's path.
func (c *Checkpoint) Path() string { return c.path }

// CheckpointError is a checkpoint file that could not be loaded or saved.
// Err says why: for a failed file operation it is the *fs.PathError of
// that operation (naming the temporary file when a save failed before its
// rename), so errors.Is finds the cause: syscall.ENOSPC or
// syscall.EDQUOT for a full disk, syscall.EROFS for a read-only file
// system, fs.ErrPermission, fs.ErrNotExist.
type CheckpointError struct {
	Path   string // the checkpoint file
	Source string // the followed file, if known
	Op     string // "load" or "save"
	Err    error
}

func (e *CheckpointError) Error() string {
	of := ""
	if e.Source != "" {
		of = " (of " + e.Source + ")"
	}
	return fmt.Sprintf("srcs: checkpoint %s%s: %s: %v", e.Path, of, e.Op, e.Err)
}

// Unwrap returns Err.
func (e *CheckpointError) Unwrap() error { return e.Err }

func (c *Checkpoint) errorf(op string, err error) error {
	return &CheckpointError{Path: c.path, Source: c.source, Op: op, Err: err}
}

// Load reads the saved position. Errors are *CheckpointError values: a
// checkpoint never saved gives one wrapping fs.ErrNotExist, and a file
// that is not a checkpoint one that says what is wrong with it.
func (c *Checkpoint) Load() (Position, error) {
	pos, _, err := c.loadFiles()
	return pos, err
}

// loadFiles is Load with the stretches the tail began from the
// position's on (version 2).
func (c *Checkpoint) loadFiles() (Position, []Position, error) {
	data, err := os.ReadFile(c.path)
	if err != nil {
		return Position{}, nil, c.errorf("load", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		return Position{}, nil, c.errorf("load", err)
	}
	switch {
	case f.Version != 1 && f.Version != checkpointVersion:
		return Position{}, nil, c.errorf("load", fmt.Errorf("version %d, want 1 or %d", f.Version, checkpointVersion))
	case f.Offset < 0:
		return Position{}, nil, c.errorf("load", fmt.Errorf("offset %d is negative", f.Offset))
	}
	return f.Position, f.Files, nil
}

// Save records pos durably and atomically (see Checkpoint). When it
// returns nil, the new position survives a crash. When it fails, with a
// *CheckpointError, the file holds the position saved before (or pos, if
// only the last step, the directory's fsync, failed), never a mix, and no
// temporary file is left behind. The first Save of a Checkpoint also
// removes temporary files that a process killed during a save left in
// the directory, so that crashes cannot fill a small disk with them.
func (c *Checkpoint) Save(pos Position) error { return c.saveFiles(pos, nil) }

// saveFiles is Save with the stretches the tail began from pos's on.
func (c *Checkpoint) saveFiles(pos Position, files []Position) error {
	data, err := json.Marshal(checkpointFile{Version: checkpointVersion, Path: c.source, Position: pos, Files: files})
	if err != nil {
		return c.errorf("save", err)
	}
	data = append(data, '\n')
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.swept {
		// Best effort: a leftover that cannot be removed costs only its
		// space, and this save may still succeed.
		removeTemps(c.path)
		c.swept = true
	}
	if err := writeFileAtomic(c.path, data); err != nil {
		return c.errorf("save", err)
	}
	return nil
}

// tempPattern is the os.CreateTemp pattern of path's temporary files.
func tempPattern(path string) (dir, pattern string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	return dir, "." + base + ".*.tmp"
}

// removeTemps removes the temporary files writeFileAtomic may have left
// for path: those whose name is the pattern's with digits for the star,
// as os.CreateTemp makes them.
func removeTemps(path string) {
	dir, pattern := tempPattern(path)
	prefix, suffix, _ := strings.Cut(pattern, "*")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || len(name) <= len(prefix)+len(suffix) ||
			!strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
			continue
		}
		if digits := name[len(prefix) : len(name)-len(suffix)]; strings.Trim(digits, "0123456789") == "" {
			os.Remove(filepath.Join(dir, name))
		}
	}
}

// writeFileAtomic replaces path with data: temporary file, fsync, rename,
// fsync of the directory (without which the rename itself may be lost).
func writeFileAtomic(path string, data []byte) (err error) {
	dir, pattern := tempPattern(path)
	tmp, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
