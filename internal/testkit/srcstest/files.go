package srcstest

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// WriteFile writes body to dir/name and returns the path.
func WriteFile(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// LockedBuffer is a bytes.Buffer safe for concurrent use: a process's or
// a logger's output can be written into it while the test reads it.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Scrape fetches a Prometheus metrics url and returns the value of a
// sample, given with its labels as it appears in the exposition format;
// ok is false when the page has no such sample.
func Scrape(t testing.TB, url, sample string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if s, found := strings.CutPrefix(line, sample+" "); found {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("%s: sample %s: %v", url, sample, err)
			}
			return f, true
		}
	}
	return 0, false
}
