package srcs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Position is a place in a followed file: the file's inode and a byte
// offset in it. The inode tells a rotated file from its replacement at the
// same path.
type Position struct {
	Inode  uint64 `json:"inode"`
	Offset int64  `json:"offset"`
}

// checkpointFile is what a checkpoint file holds, as JSON. Path is there
// for people reading the file; Load ignores it.
type checkpointFile struct {
	Version int    `json:"version"`
	Path    string `json:"path,omitempty"`
	Position
}

const checkpointVersion = 1

// Checkpoint is a file that remembers a Position across restarts. Save
// replaces it atomically and durably: it writes a temporary file in the
// same directory, fsyncs it, renames it over the checkpoint and fsyncs the
// directory, so after a crash the file holds either the old position or
// the new one, never a torn mix.
//
// A Checkpoint is safe for concurrent use; concurrent Saves are
// serialised, and the last one to run wins.
type Checkpoint struct {
	path string
	// source is recorded in the file for whoever reads it.
	source string

	mu sync.Mutex // serialises Save, so temporary files never race
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

// Load reads the saved position. A checkpoint never saved gives an error
// wrapping fs.ErrNotExist; a file that is not a checkpoint gives an error
// naming the path.
func (c *Checkpoint) Load() (Position, error) {
	data, err := os.ReadFile(c.path)
	if err != nil {
		return Position{}, fmt.Errorf("srcs: checkpoint: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		return Position{}, fmt.Errorf("srcs: checkpoint %s: %w", c.path, err)
	}
	switch {
	case f.Version != checkpointVersion:
		return Position{}, fmt.Errorf("srcs: checkpoint %s: version %d, want %d", c.path, f.Version, checkpointVersion)
	case f.Offset < 0:
		return Position{}, fmt.Errorf("srcs: checkpoint %s: offset %d is negative", c.path, f.Offset)
	}
	return f.Position, nil
}

// Save records pos durably and atomically (see Checkpoint). When it
// returns nil, the new position survives a crash.
func (c *Checkpoint) Save(pos Position) error {
	data, err := json.Marshal(checkpointFile{Version: checkpointVersion, Path: c.source, Position: pos})
	if err != nil {
		return fmt.Errorf("srcs: checkpoint %s: %w", c.path, err)
	}
	data = append(data, '\n')
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := writeFileAtomic(c.path, data); err != nil {
		return fmt.Errorf("srcs: checkpoint: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with data: temporary file, fsync, rename,
// fsync of the directory (without which the rename itself may be lost).
func writeFileAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
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
