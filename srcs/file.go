package srcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/sluice-io/sluice/internal/contract"
)

// FileConfig configures NewFile.
type FileConfig struct {
	// Path names a regular file.
	Path string `yaml:"path"`
	// Offset is where each pass starts reading.
	Offset int64 `yaml:"offset"`
	// Repeat is the number of extra passes over the file, for benchmarks:
	// Again returns true Repeat times. Zero reads the file once.
	Repeat int `yaml:"repeat"`
}

// FileSource is a source over a regular file, read from Offset to its end.
// The uring, epoll and thread runners read its descriptor positionally
// (Desc); Read reads it sequentially instead, for the goroutine runner. A session is
// driven one way or the other, not both: Desc reports Offset, not what
// Read has consumed.
//
// FileSource is not safe for concurrent use, except that Close may be called
// while Read runs.
type FileSource struct {
	cfg FileConfig

	mu     sync.Mutex
	f      *os.File // nil between sessions
	passes int      // extra passes granted by Again
}

// NewFile checks cfg and returns a FileSource that has not opened the path yet.
func NewFile(cfg FileConfig) (*FileSource, error) {
	switch {
	case cfg.Path == "":
		return nil, errors.New("srcs: file: Path is empty")
	case cfg.Offset < 0:
		return nil, fmt.Errorf("srcs: file %s: Offset: %d is negative", cfg.Path, cfg.Offset)
	case cfg.Repeat < 0:
		return nil, fmt.Errorf("srcs: file %s: Repeat: %d is negative", cfg.Path, cfg.Repeat)
	}
	return &FileSource{cfg: cfg}, nil
}

// Name returns the path.
func (s *FileSource) Name() string { return s.cfg.Path }

// Open opens the file and positions it at Offset. Errors are
// *fs.PathError values naming the path: errors.Is(err, fs.ErrNotExist)
// for a missing file, syscall.EISDIR for a directory, fs.ErrPermission
// when access is denied.
func (s *FileSource) Open(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		return fmt.Errorf("srcs: open %s: already open", s.cfg.Path)
	}
	// Check the type before opening as well as after: opening a FIFO
	// would block until a writer appears.
	if err := s.checkRegular(os.Stat(s.cfg.Path)); err != nil {
		return err
	}
	f, err := os.Open(s.cfg.Path)
	if err != nil {
		return fmt.Errorf("srcs: %w", err)
	}
	if err := s.checkRegular(f.Stat()); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Seek(s.cfg.Offset, io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("srcs: %w", err)
	}
	s.f = f
	return nil
}

func (s *FileSource) checkRegular(fi fs.FileInfo, err error) error {
	if err != nil {
		return fmt.Errorf("srcs: %w", err)
	}
	if fi.Mode().IsRegular() {
		return nil
	}
	cause := error(syscall.EISDIR)
	if !fi.IsDir() {
		cause = fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	return fmt.Errorf("srcs: %w", &fs.PathError{Op: "open", Path: s.cfg.Path, Err: cause})
}

func (s *FileSource) file(op string) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil, fmt.Errorf("srcs: %s %s: %w", op, s.cfg.Path, os.ErrClosed)
	}
	return s.f, nil
}

// Read reads the next bytes of the current pass; io.EOF ends it.
func (s *FileSource) Read(p []byte) (int, error) {
	f, err := s.file("read")
	if err != nil {
		return 0, err
	}
	return f.Read(p)
}

// Desc is for the engine's runners, which read the file themselves; a
// program has no use for it. It returns the open file for positional
// reads from Offset.
func (s *FileSource) Desc() (contract.Desc, error) {
	f, err := s.file("desc")
	if err != nil {
		return contract.Desc{}, err
	}
	// Fd would switch a pollable descriptor to blocking mode; regular
	// files are never pollable, so that is harmless here.
	return contract.Desc{FD: int(f.Fd()), Kind: contract.File, Offset: s.cfg.Offset}, nil
}

// Again grants another pass while Repeat allows.
func (s *FileSource) Again() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.passes >= s.cfg.Repeat {
		return false
	}
	s.passes++
	return true
}

// Close closes the file. It is idempotent, and Open may follow.
func (s *FileSource) Close() error {
	s.mu.Lock()
	f := s.f
	s.f = nil
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("srcs: %w", err)
	}
	return nil
}

var (
	_ Source              = (*FileSource)(nil)
	_ contract.Descriptor = (*FileSource)(nil)
	_ Repeater            = (*FileSource)(nil)
)
