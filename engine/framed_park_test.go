package engine_test

import (
	"fmt"
	"hash/crc32"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// TestFramedParkedPartsArrive: framed lanes that wait for the rest of a
// line give their buffers back (the part waits outside the pool), and a
// part still waiting when its source is stopped arrives, flagged
// Truncated, even when the consumer holds every pool buffer then.
func TestFramedParkedPartsArrive(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		const buffers = 8
		h := newHarness(t, runner, engine.Config{Buffers: buffers, BufSize: 4 << 10, MaxPerSource: buffers, Flush: 2 * time.Millisecond})
		ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{Framer: srcs.Newline{}})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.e.AddListener(ln); err != nil {
			t.Fatal(err)
		}
		// The tag (streamid_test.go) starts each stream's first line.
		dial := func() (net.Conn, string) { return dialTagged(t, ln.Addr().String(), nil) }
		waitUntil := func(what string, cond func() bool) {
			t.Helper()
			for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("timed out waiting for %s", what)
				}
			}
		}

		// Slow senders, each with part of a line and no newline. While
		// they are open and none of the test's connections has closed,
		// their names tell their sources apart in Stats.
		parts := map[string][]byte{}
		keyOf := map[string]string{} // source name to key
		var conns []net.Conn
		for i := range 3 {
			c, key := dial()
			conns = append(conns, c)
			keyOf["tcp://"+c.LocalAddr().String()] = key
			p := []byte(fmt.Sprintf("part of line %d, still coming", i))
			parts[key] = p
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		ids := map[string]srcs.ID{}
		slowHeld := func() int {
			held := 0
			for _, s := range h.e.Stats().Sources {
				if key, ok := keyOf[s.Name]; ok {
					ids[key] = s.ID
					held += s.Held
				}
			}
			return held
		}
		waitUntil("the parts to be read and leave the pool", func() bool {
			var reads uint64
			for _, r := range h.e.Stats().Runners {
				reads += r.Reads
			}
			return slowHeld() == 0 && len(ids) == len(parts) && reads >= uint64(len(parts))
		})

		// A bulk sender fills the pool with chunks the consumer holds.
		h.col.setHold(true)
		bulk, bulkName := dial()
		lines := []byte(strings.Repeat(strings.Repeat("b", 99)+"\n", 400))
		go func() {
			bulk.Write(lines)
			bulk.Close()
		}()
		waitUntil("the pool to run dry", func() bool { return h.e.Stats().Pool.InUse == buffers })
		if n := slowHeld(); n != 0 {
			t.Fatalf("the slow lanes hold %d buffers, want their parts outside the pool", n)
		}

		// Stopped now, the slow lanes find no buffer for their parts.
		for name, id := range ids {
			if err := h.e.StopSource(id); err != nil {
				t.Fatalf("stop %s: %v", name, err)
			}
		}
		h.col.waitFor("the stopped sources' ends", 20*time.Second, func(m map[string]*stream) bool {
			for name := range parts {
				if s := m[name]; s == nil || !s.eos {
					return false
				}
			}
			return true
		})
		for name, p := range parts {
			if got := h.col.get(name); got.bytes != int64(len(p)) || got.crc != crc32.Checksum(p, srcstest.Castagnoli) {
				t.Errorf("%s: got %d bytes crc %08x, want %q", name, got.bytes, got.crc, p)
			}
		}
		h.col.setHold(false)
		h.col.waitFor("the bulk stream's end", 20*time.Second, func(m map[string]*stream) bool {
			s := m[bulkName]
			return s != nil && s.eos
		})
		if got := h.col.get(bulkName); got.bytes != int64(len(lines)) || got.crc != crc32.Checksum(lines, srcstest.Castagnoli) {
			t.Errorf("bulk: got %d bytes, want %d", got.bytes, len(lines))
		}
	})
}
