package runnertest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
	"golang.org/x/sys/unix"
)

// FileSource is a regular file read from an offset: through Read (for the
// goroutine runner), or as a File descriptor whose Desc says the offset.
type FileSource struct {
	F   *os.File
	Off int64
}

func (s *FileSource) Name() string               { return s.F.Name() }
func (s *FileSource) Open(context.Context) error { return nil }
func (s *FileSource) Close() error               { return s.F.Close() }

func (s *FileSource) Read(p []byte) (int, error) {
	n, err := s.F.ReadAt(p, s.Off)
	s.Off += int64(n)
	if n > 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

func (s *FileSource) Desc() (contract.Desc, error) {
	return contract.Desc{FD: int(s.F.Fd()), Kind: contract.File, Offset: s.Off}, nil
}

// TempFile writes data to a new file in the test's temporary directory and
// opens it for reading. Closing it is the caller's (or its source's).
func TempFile(t testing.TB, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// FDSource is a source over a raw descriptor of the given kind, read with
// read(2) by runners that read through Read (blocking, unless the
// descriptor is not). Close closes the descriptor once.
type FDSource struct {
	FD   int
	Kind contract.Kind

	once sync.Once
}

func (s *FDSource) Name() string                 { return "fd" }
func (s *FDSource) Open(context.Context) error   { return nil }
func (s *FDSource) Desc() (contract.Desc, error) { return contract.Desc{FD: s.FD, Kind: s.Kind}, nil }

// Read reads once with read(2); zero bytes are the end of the stream.
func (s *FDSource) Read(p []byte) (int, error) {
	n, err := unix.Read(s.FD, p)
	switch {
	case err != nil:
		return 0, err
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *FDSource) Close() error {
	s.once.Do(func() { unix.Close(s.FD) })
	return nil
}

// NoDesc is a source that is nothing but a Source: no descriptor, no
// deadline, and an empty stream.
type NoDesc struct{}

func (NoDesc) Name() string               { return "nodesc" }
func (NoDesc) Open(context.Context) error { return nil }
func (NoDesc) Read([]byte) (int, error)   { return 0, io.EOF }
func (NoDesc) Close() error               { return nil }

// Socketpair returns a connected pair of unix sockets of type typ
// (unix.SOCK_STREAM or unix.SOCK_DGRAM), in blocking mode. Closing them is
// the caller's, or the sources' it hands them to.
func Socketpair(t testing.TB, typ int) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
	if err != nil {
		t.Fatal(os.NewSyscallError("socketpair", err))
	}
	unix.CloseOnExec(fds[0])
	unix.CloseOnExec(fds[1])
	return fds[0], fds[1]
}

// Pipe returns a pipe's reading and writing ends, in blocking mode.
// Closing them is the caller's, or the sources' it hands them to.
func Pipe(t testing.TB) (int, int) {
	t.Helper()
	var fds [2]int
	if err := unix.Pipe(fds[:]); err != nil {
		t.Fatal(os.NewSyscallError("pipe", err))
	}
	unix.CloseOnExec(fds[0])
	unix.CloseOnExec(fds[1])
	return fds[0], fds[1]
}
