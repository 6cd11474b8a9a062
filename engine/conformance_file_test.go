package engine_test

import (
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// fileSize is the size of the file the file conformance test reads.
const fileSize = 256 << 20

// writeBigFile writes fileSize seeded random bytes to a file in dir and
// returns its path and their CRC-32C.
func writeBigFile(t *testing.T, dir string) (string, uint32) {
	t.Helper()
	path := filepath.Join(dir, "data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := crc32.New(srcstest.Castagnoli)
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.NewChaCha8([32]byte{1}), fileSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, h.Sum32()
}

func TestConformanceFile(t *testing.T) {
	path, want := writeBigFile(t, t.TempDir())
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
