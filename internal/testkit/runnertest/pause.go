package runnertest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// pause pauses a runner while its lanes' data keeps arriving: nothing is
// read until the resume (but reads already under way, where the runner has
// them), and the resume gets the lanes going without new data. Lanes
// removed while paused emit what they hold as one Partial, then
// srcs.ErrStopped; a lane that holds data across the pause delivers all
// of it. The runner never closes a source.
func (s suite) pause(t *testing.T) {
	g := s.rig(t, pool.Config{BufSize: 16 << 10, Buffers: 8}, 2)
	g.Rec.Keep = true
	client, l := g.Conn(0)
	piece := []byte("0123456789")
	bytesNow := func() int64 { return g.Rec.Lane(l.ID).Bytes }
	if _, err := client.Write(piece); err != nil {
		t.Fatal(err)
	}
	// Lanes that hold 1000 bytes each, as partial data, for the hour-long
	// flush timeout.
	const held = 3
	heldClients := make([]*net.TCPConn, held)
	heldLanes := make([]*contract.Lane, held)
	sent := make([][]byte, held)
	for i := range held {
		c, hl := g.Conn(time.Hour)
		heldClients[i], heldLanes[i] = c, hl
		sent[i] = RandomBytes(uint64(10+i), 1000)
		if _, err := c.Write(sent[i]); err != nil {
			t.Fatal(err)
		}
	}
	g.WaitUntil("the first piece", func() bool { return bytesNow() == 10 })
	g.WaitUntil("every held lane to read", func() bool {
		for _, hl := range heldLanes {
			if hl.Account.Stats().Held != 1 {
				return false
			}
		}
		return g.R.Stats().Reads >= 1+held
	})

	g.R.SetPaused(true)
	g.R.SetPaused(true) // idempotent
	barrier(g.R)
	exact := barrier(g.R) // reads issued before the pause are reaped
	before := g.R.Stats()
	// The edges for these bytes arrive while paused and must not be lost.
	for range 2 {
		if _, err := client.Write(piece); err != nil {
			t.Fatal(err)
		}
		for i, c := range heldClients {
			more := RandomBytes(uint64(20+i), 1500)
			sent[i] = append(sent[i], more...)
			if _, err := c.Write(more); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond) // time for reads that must not happen
	}
	barrier(g.R)
	after := g.R.Stats()
	// A read under way when the pause began may complete with the next
	// piece, on each lane; the one after it must wait for the resume.
	maxBytes, maxReads := int64(10), uint64(0)
	switch {
	case s.ReadsInFlight:
		maxBytes, maxReads = 20, 1+held
	case !exact:
		maxReads = 1 + held
	}
	if n := bytesNow(); n > maxBytes {
		t.Fatalf("paused runner read on: %d bytes, want at most %d", n, maxBytes)
	}
	// Nor may it spin on readable sources it must not read: a few
	// wake-ups for each lane's new data, no more.
	const maxWaits = 10 * (1 + held)
	if r, w := after.Reads-before.Reads, after.Waits-before.Waits; r > maxReads || w > maxWaits {
		t.Errorf("while paused: %d reads and %d waits, want at most %d and %d", r, w, maxReads, maxWaits)
	}

	// Removing while paused: what the lane read comes out as one Partial
	// (and no more than the reads under way took), then ErrStopped.
	g.R.Remove(heldLanes[0])
	g.R.Remove(heldLanes[1])
	g.R.Remove(heldLanes[1]) // twice: a no-op
	got := g.Finished(2)
	for i, hl := range heldLanes[:2] {
		lr := got[hl.ID]
		if !errors.Is(lr.Err, srcs.ErrStopped) {
			t.Errorf("lane %d removed while paused: finished with %v, want srcs.ErrStopped", hl.ID, lr.Err)
		}
		data := g.Rec.Lane(hl.ID).Data
		if lr.Partials != 1 || !bytes.HasPrefix(sent[i], data) || len(data) < 1000 || !s.ReadsInFlight && len(data) != 1000 {
			t.Errorf("lane %d removed while paused: emitted %d bytes in %d partial chunks, want the 1000 read before the pause in one", hl.ID, len(data), lr.Partials)
		}
	}
	g.R.Remove(heldLanes[0]) // after Finish: a no-op

	g.R.SetPaused(false)
	g.WaitUntil("reads to resume", func() bool { return bytesNow() == 30 })
	last := heldLanes[held-1]
	heldClients[held-1].Close()
	if lr := g.Finish(last); !errors.Is(lr.Err, io.EOF) || !bytes.Equal(g.Rec.Lane(last.ID).Data, sent[held-1]) {
		t.Errorf("lane %d held across the pause: finished with %v after %d of %d bytes", last.ID, lr.Err, lr.Bytes, len(sent[held-1]))
	}

	g.R.SetPaused(true)
	if _, err := client.Write(piece); err != nil {
		t.Fatal(err)
	}
	g.R.Remove(l)
	lr := g.Finish(l)
	if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes < 30 || lr.Bytes > maxBytes+20 {
		t.Errorf("removed while paused: finished with %v after %d bytes, want srcs.ErrStopped after 30", lr.Err, lr.Bytes)
	}
	g.R.Remove(l) // after Finish: a no-op
	g.R.SetPaused(false)
	if st := g.R.Stats(); st.Lanes != 0 {
		t.Errorf("after Finish: %d lanes", st.Lanes)
	}
	if n := g.Pool.Stats().InUse; n != 0 {
		t.Errorf("removed lanes hold %d buffers", n)
	}
	// The runner never closes a source: the connection still works.
	if _, err := client.Write(piece); err != nil {
		t.Errorf("write after Remove: %v", err)
	}
}

// pausedGrant makes a paused lane the first waiter for the only buffer:
// the grant must not stay with it for the whole pause but go on to the
// next waiter, and the lane must read after the resume.
func (s suite) pausedGrant(t *testing.T) {
	g := s.rig(t, pool.Config{Buffers: 1}, 1)
	holderClient, holder := g.Conn(time.Hour)
	holderClient.Write(make([]byte, 100))
	g.WaitUntil("the first lane to read", func() bool { return g.R.Stats().Reads >= 1 && g.Pool.Stats().InUse == 1 })
	// Added only now, so that the buffer is the first lane's even where
	// an idle lane takes one.
	client, waiter := g.Conn(time.Hour)
	client.Write(make([]byte, 50))
	g.WaitUntil("the second lane to wait for a buffer", func() bool { return g.Pool.Stats().Waiters == 1 })

	g.R.SetPaused(true)
	barrier(g.R)
	// A waiter that is not paused, queued behind the second lane.
	other := g.Pool.Join(1 << 20)
	defer other.Leave()
	granted := make(chan struct{}, 1)
	if _, ok, err := other.Wait(func() { granted <- struct{}{} }); ok || err != nil {
		t.Fatalf("Wait: ok %v, err %v; want to queue", ok, err)
	}
	g.R.Remove(holder) // emits its 100 bytes; the recorder frees the buffer
	select {
	case <-granted:
	case <-time.After(waitTimeout):
		t.Fatalf("paused lane kept the buffer: %+v, it holds %d", g.Pool.Stats(), waiter.Account.Stats().Held)
	}
	b, ok := other.Claim()
	if !ok {
		t.Fatal("Claim after the grant: no buffer")
	}
	if held := waiter.Account.Stats().Held; held != 0 {
		t.Errorf("paused lane holds %d buffers", held)
	}
	b.Release()

	g.R.SetPaused(false)
	client.Close()
	got := g.Finished(2)
	if lr := got[holder.ID]; !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 100 {
		t.Errorf("removed lane: finished with %v after %d bytes, want srcs.ErrStopped after 100", lr.Err, lr.Bytes)
	}
	if lr := got[waiter.ID]; lr.Err != io.EOF || lr.Bytes != 50 {
		t.Errorf("paused lane after the resume: finished with %v after %d bytes, want io.EOF after 50", lr.Err, lr.Bytes)
	}
}

// flushWhilePaused lets a lane's flush timeout pass while the runner is
// paused: its data comes out on time, and the lane holds no buffer after.
func (s suite) flushWhilePaused(t *testing.T) {
	const flush = 80 * time.Millisecond
	g := s.rig(t, pool.Config{Buffers: 4}, 1)
	client, l := g.Conn(flush)
	if _, err := client.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	g.WaitUntil("the read", func() bool { return g.R.Stats().Reads >= 1 })
	g.R.SetPaused(true)
	g.WaitUntil("a flush while paused", func() bool { return g.Rec.Lane(l.ID).Partials == 1 })
	if lr := g.Rec.Lane(l.ID); lr.Bytes != 4 {
		t.Errorf("flushed %d bytes, want 4", lr.Bytes)
	}
	// The flushed lane holds nothing while paused.
	g.WaitUntil("the pool to drain", func() bool { return g.Pool.Stats().InUse == 0 })
	g.R.SetPaused(false)
}

// removePartial removes a lane that holds partial data: it comes out as
// one Partial before srcs.ErrStopped, and the source stays open.
func (s suite) removePartial(t *testing.T) {
	g := s.rig(t, pool.Config{Buffers: 4}, 1)
	client, l := g.Conn(time.Hour)
	if _, err := client.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	g.WaitUntil("the read", func() bool { return g.R.Stats().Reads >= 1 })
	g.R.Remove(l)
	lr := g.Finish(l)
	if !errors.Is(lr.Err, srcs.ErrStopped) || lr.Bytes != 7 || lr.Partials != 1 {
		t.Errorf("removed: %v after %d bytes in %d partials, want srcs.ErrStopped after 7 in 1", lr.Err, lr.Bytes, lr.Partials)
	}
	// The source is still open: the runner stopped without closing it.
	if _, err := client.Write([]byte("more")); err != nil {
		t.Errorf("write after Remove: %v", err)
	}
}
