package engine_test

import (
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// fileSize is the size of the file the file conformance test reads.
const fileSize = 256 << 20

var bigFile = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sluice-file-test")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "data")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r := rand.NewChaCha8([32]byte{1})
	if _, err := io.CopyN(f, r, fileSize); err != nil {
		return "", err
	}
	return path, f.Close()
})

func TestConformanceFile(t *testing.T) {
	path, err := bigFile()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(path)) })
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := crc32.Checksum(data, srcstest.Castagnoli)
	data = nil
	forEachRunner(t, func(t *testing.T, runner string) {
		h := newHarness(t, runner, engine.Config{Workers: 1, Buffers: 64, BufSize: 256 << 10})
		src, err := srcs.NewFile(srcs.FileConfig{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.e.AddSource(src); err != nil {
			t.Fatal(err)
		}
		h.col.waitFor("the end of the file", 120*time.Second, func(m map[string]*stream) bool {
			s := m[path]
			return s != nil && s.eos
		})
		got := h.col.get(path)
		if got.bytes != fileSize || got.crc != want {
			t.Fatalf("%s: read %d bytes crc %08x, want %d crc %08x", runner, got.bytes, got.crc, fileSize, want)
		}
	})
}
