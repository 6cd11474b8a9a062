package srcs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

func writeFile(t *testing.T, data []byte, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(p, data, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewFileConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   srcs.FileConfig
		field string
	}{
		{"valid", srcs.FileConfig{Path: "/x", Offset: 3, Repeat: 2}, ""},
		{"no path", srcs.FileConfig{}, "Path"},
		{"negative offset", srcs.FileConfig{Path: "/x", Offset: -1}, "Offset"},
		{"negative repeat", srcs.FileConfig{Path: "/x", Repeat: -1}, "Repeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := srcs.NewFile(tt.cfg)
			if (err == nil) != (tt.field == "") || (err != nil && !strings.Contains(err.Error(), tt.field)) {
				t.Errorf("NewFile(%+v) = %v, want an error naming %q", tt.cfg, err, tt.field)
			}
		})
	}
}

func TestFileOpenErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		path func(t *testing.T) string
		is   error
		root bool // open without root's file access (see asUnprivileged)
	}{
		{"missing", func(*testing.T) string { return filepath.Join(dir, "missing") }, fs.ErrNotExist, false},
		{"directory", func(*testing.T) string { return dir }, syscall.EISDIR, false},
		{"permission denied", func(t *testing.T) string { return writeFile(t, []byte("x"), 0) }, fs.ErrPermission, true},
		{"fifo", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fifo")
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			return p
		}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path(t)
			f, err := srcs.NewFile(srcs.FileConfig{Path: p})
			if err != nil {
				t.Fatal(err)
			}
			if tt.root {
				err = asUnprivileged(func() error { return f.Open(context.Background()) })
				if errors.Is(err, errors.ErrUnsupported) {
					t.Skip("running as root on a system where a test cannot drop file access")
				}
			} else {
				err = f.Open(context.Background())
			}
			if err == nil {
				f.Close()
				t.Fatalf("Open(%s) succeeded", p)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("Open = %v, want an error wrapping %v", err, tt.is)
			}
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Path != p || !strings.Contains(err.Error(), p) {
				t.Errorf("Open = %v, want an *fs.PathError naming %s", err, p)
			}
			if _, err := f.Desc(); !errors.Is(err, os.ErrClosed) {
				t.Errorf("Desc after failed Open = %v, want os.ErrClosed", err)
			}
		})
	}
}

// TestFilePasses reads the file from an offset, through Read and through
// Desc with pread, for 1+Repeat passes.
func TestFilePasses(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	p := writeFile(t, data, 0o600)
	tests := []struct {
		offset int64
		repeat int
		desc   bool
	}{
		{0, 0, false},
		{7, 2, false},
		{7, 2, true},
		{int64(len(data)), 1, false}, // nothing to read
		{int64(len(data)) + 5, 0, true},
	}
	for _, tt := range tests {
		f, err := srcs.NewFile(srcs.FileConfig{Path: p, Offset: tt.offset, Repeat: tt.repeat})
		if err != nil {
			t.Fatal(err)
		}
		if f.Name() != p {
			t.Errorf("Name = %q, want %q", f.Name(), p)
		}
		want := data[min(tt.offset, int64(len(data))):]
		passes := 0
		for {
			if err := f.Open(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := f.Open(context.Background()); err == nil {
				t.Fatal("second Open succeeded")
			}
			var got []byte
			if tt.desc {
				got = preadAll(t, f, tt.offset)
			} else {
				got, err = io.ReadAll(f)
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("offset %d pass %d: read %d bytes, want %d", tt.offset, passes, len(got), len(want))
			}
			passes++
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if !f.Again() {
				break
			}
			if passes > tt.repeat+1 {
				t.Fatalf("Again still true after %d passes", passes)
			}
		}
		if passes != tt.repeat+1 {
			t.Errorf("offset %d repeat %d: %d passes, want %d", tt.offset, tt.repeat, passes, tt.repeat+1)
		}
		if f.Again() {
			t.Error("Again true after it returned false")
		}
	}
}

func preadAll(t *testing.T, f *srcs.FileSource, offset int64) []byte {
	t.Helper()
	d, err := f.Desc()
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != contract.File || d.Offset != offset {
		t.Fatalf("Desc = %+v, want Kind file at offset %d", d, offset)
	}
	var out []byte
	buf := make([]byte, 4096)
	for off := d.Offset; ; {
		n, err := unix.Pread(d.FD, buf, off)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
		off += int64(n)
	}
}
