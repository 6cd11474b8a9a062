package harness

import (
	"strings"
	"sync"
)

// TailBuffer keeps the last lines written to it, up to max bytes.
type TailBuffer struct {
	mu    sync.Mutex
	Max   int
	lines []string
	n     int
}

func (t *TailBuffer) Add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	t.n += len(l) + 1
	for t.n > t.Max && len(t.lines) > 1 {
		t.n -= len(t.lines[0]) + 1
		t.lines = t.lines[1:]
	}
}

func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
