package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// releaseFile is a file source that records how far its bytes have been
// released, as a tail does for its checkpoint.
type releaseFile struct {
	*srcs.FileSource
	through atomic.Int64
}

func (r *releaseFile) Released(through int64) { r.through.Store(through) }

// TestFramedSkipKeepsOffsets: bytes of a record skipped for being too long
// still count in the offsets a ReleaseObserver sees, so that a checkpoint
// taken from them points into the source where the delivered bytes end,
// not short of them by the skipped record.
func TestFramedSkipKeepsOffsets(t *testing.T) {
	body := "ok\n" + strings.Repeat("x", 500) + "\nfine\n" + strings.Repeat("y", 300) + "\nend\n"
	path := filepath.Join(t.TempDir(), "lines")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	forEachRunner(t, func(t *testing.T, runner string) {
		t.Setenv(engine.EnvRunner, "")
		e, err := engine.New(engine.Config{Runner: runner, Buffers: 16, BufSize: 4096},
			engine.WithHandler(func(c engine.Chunk) { c.Release() }))
		if err != nil {
			t.Fatal(err)
		}
		defer e.Shutdown(context.Background())
		fs, err := srcs.NewFile(srcs.FileConfig{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		src := &releaseFile{FileSource: fs}
		if _, err := e.AddSource(src, engine.WithFraming(srcs.Newline{Max: 100})); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for src.through.Load() != int64(len(body)) {
			if time.Now().After(deadline) {
				t.Fatalf("released through %d, want %d (the file's size: the skipped lines count)", src.through.Load(), len(body))
			}
			time.Sleep(time.Millisecond)
		}
		if n := e.Totals().RecordsSkipped; n != 2 {
			t.Errorf("RecordsSkipped %d, want 2", n)
		}
	})
}
