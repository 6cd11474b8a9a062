package engine_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// unixSockets runs 100 unix-socket connections through a srcs unix
// listener; each stream arrives byte-exact.
func unixSockets(t *testing.T, runner string) {
	t.Setenv(engine.EnvRunner, "")
	e, err := engine.New(engine.Config{Runner: runner, Workers: 2, Buffers: 64, BufSize: 8 << 10, Flush: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.sock")
	ln, err := srcs.ListenUnix(path, srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddListener(ln); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		data []byte
		eos  bool
	}
	var mu sync.Mutex
	streams := map[srcs.ID]*rec{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pullAll(e, func(c engine.Chunk) {
			mu.Lock()
			defer mu.Unlock()
			r := streams[c.Source]
			if r == nil {
				r = &rec{}
				streams[c.Source] = r
			}
			r.data = append(r.data, c.Data...)
			r.eos = r.eos || c.Flags&srcs.EndOfStream != 0
		})
	}()
	const n = 100
	want := make(map[uint64]uint32, n)
	var wg sync.WaitGroup
	var wmu sync.Mutex
	for i := range n {
		wg.Go(func() {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Error(err)
				return
			}
			r := rand.New(rand.NewPCG(uint64(i), 3))
			msg := make([]byte, 8+r.IntN(64<<10))
			binary.LittleEndian.PutUint64(msg, uint64(i))
			for j := 8; j < len(msg); j++ {
				msg[j] = byte(r.Uint32())
			}
			for off := 0; off < len(msg); {
				k := min(len(msg)-off, 1+r.IntN(8<<10))
				if _, err := c.Write(msg[off : off+k]); err != nil {
					t.Error(err)
					return
				}
				off += k
			}
			c.Close()
			wmu.Lock()
			want[uint64(i)] = crc32.Checksum(msg, srcstest.Castagnoli)
			wmu.Unlock()
		})
	}
	wg.Wait()
	waitUntil(t, "every unix stream's end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		ended := 0
		for _, r := range streams {
			if r.eos {
				ended++
			}
		}
		return ended == n
	})
	mu.Lock()
	for id, r := range streams {
		if len(r.data) < 8 {
			t.Fatalf("%s: source %d delivered %d bytes", runner, id, len(r.data))
		}
		who := binary.LittleEndian.Uint64(r.data)
		if crc32.Checksum(r.data, srcstest.Castagnoli) != want[who] {
			t.Fatalf("%s: stream of sender %d corrupted", runner, who)
		}
		delete(want, who)
	}
	mu.Unlock()
	if len(want) != 0 {
		t.Fatalf("%s: %d senders never seen", runner, len(want))
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
}
