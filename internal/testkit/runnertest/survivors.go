package runnertest

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// survivorStall is how long a survivor's write may make no progress
// before survivors fails: a healthy runner reads a socket with data
// within milliseconds, on a loaded machine within a second or two.
const survivorStall = 10 * time.Second

// survivors keeps a few lanes streaming flat out on one worker while waves
// of many short lanes start, send and end around them, all at once, as a
// wave of connections closes under a busy worker: their slots are freed
// and taken again, and their buffers come and go, while the survivors'
// sockets stay readable. Every survivor must be read throughout: a write
// that makes no progress for survivorStall means the runner left a
// readable socket unread, and fails the case. Every lane must deliver
// exactly its bytes.
func (s suite) survivors(t *testing.T) {
	const few, many, waves = 4, 300, 3
	g := s.rig(t, pool.Config{Buffers: 64}, 1)
	type survivor struct {
		c       *net.TCPConn
		l       *contract.Lane
		written int64
		crc     uint32
	}
	surv := make([]*survivor, few)
	for i := range surv {
		c, l := g.Conn(time.Millisecond)
		surv[i] = &survivor{c: c, l: l}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, few)
	for i, sv := range surv {
		wg.Go(func() {
			defer sv.c.Close()
			period := RandomBytes(uint64(1<<20+i), 1<<20)
			rng := rand.New(rand.NewPCG(uint64(i), 0x5a))
			for off := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				p := period[off:min(off+1+rng.IntN(64<<10), len(period))]
				sv.c.SetWriteDeadline(time.Now().Add(survivorStall))
				n, err := sv.c.Write(p)
				sv.written += int64(n)
				sv.crc = crc32.Update(sv.crc, srcstest.Castagnoli, p[:n])
				if err != nil {
					errc <- fmt.Errorf("survivor %d: no progress for %v after %d bytes, while %d other lanes came and went: %w",
						i, survivorStall, sv.written, many, err)
					return
				}
				off = (off + n) % len(period)
			}
		})
	}
	for w := range waves {
		clients := make([]net.Conn, many)
		want := make(map[srcs.ID][]byte, many)
		ids := make([]srcs.ID, many)
		for j := range clients {
			c, l := g.Conn(time.Millisecond)
			clients[j], ids[j] = c, l.ID
			want[l.ID] = RandomBytes(uint64(w*many+j), rand.IntN(16<<10))
		}
		for j, c := range clients {
			if _, err := c.Write(want[ids[j]]); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range clients {
			c.Close() // all at once
		}
		got := g.Finished(many)
		for id, data := range want {
			if lr := got[id]; lr == nil || !errors.Is(lr.Err, io.EOF) || lr.Bytes != int64(len(data)) || lr.CRC != CRC(data) {
				t.Fatalf("wave %d, lane %d: got %+v, sent %d bytes crc %08x", w, id, lr, len(data), CRC(data))
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	got := g.Finished(few)
	for i, sv := range surv {
		lr := got[sv.l.ID]
		if lr == nil || !errors.Is(lr.Err, io.EOF) || lr.Bytes != sv.written || lr.CRC != sv.crc {
			t.Errorf("survivor %d: got %+v, sent %d bytes crc %08x", i, lr, sv.written, sv.crc)
		}
	}
}
