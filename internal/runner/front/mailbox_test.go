package front

import (
	"slices"
	"sync"
	"testing"
)

// TestMailbox: commands come out in order, a stopped mailbox refuses
// posts and hands over what was queued, and wake runs under the lock with
// every post.
func TestMailbox(t *testing.T) {
	var m Mailbox[int]
	m.SetGenMask(0xff)
	wakes := 0
	wake := func() {
		if m.Mu.TryLock() {
			t.Error("wake ran without the lock")
			m.Mu.Unlock()
		}
		wakes++
	}
	for i := range 3 {
		if !m.Post(i, wake) {
			t.Fatal("post refused before Stop")
		}
	}
	if !m.Pending() || wakes != 3 {
		t.Fatalf("pending %v, %d wakes", m.Pending(), wakes)
	}
	got := m.Take()
	if !slices.Equal(got, []int{0, 1, 2}) || m.Pending() {
		t.Fatalf("took %v", got)
	}
	m.Recycle(got)
	m.Post(3, nil)
	closed := false
	rest := m.Stop(func() { closed = !m.Mu.TryLock() })
	if !slices.Equal(rest, []int{3}) || !closed || !m.Stopped() {
		t.Fatalf("stop: rest %v, close under the lock %v, stopped %v", rest, closed, m.Stopped())
	}
	if m.Post(4, wake) || wakes != 3 {
		t.Fatal("a stopped mailbox took a post")
	}
	idx, gen := m.AllocSlot()
	m.FreeSlot(idx)
	if idx2, gen2 := m.AllocSlot(); idx2 != idx || gen2 == gen {
		t.Fatalf("slot %d gen %d reused as %d gen %d", idx, gen, idx2, gen2)
	}
	m.AddLoad(2)
	m.AddLoad(-1)
	if m.Load() != 1 {
		t.Fatalf("load %d", m.Load())
	}
}

// TestMailboxConcurrentPosts: posts from many goroutines all arrive once.
func TestMailboxConcurrentPosts(t *testing.T) {
	var m Mailbox[int]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				m.Post(g*1000+i, nil)
			}
		})
	}
	seen := map[int]bool{}
	defer wg.Wait()
	for {
		cmds := m.Take()
		for _, c := range cmds {
			if seen[c] {
				t.Fatalf("%d twice", c)
			}
			seen[c] = true
		}
		m.Recycle(cmds)
		if len(seen) == 8000 {
			return
		}
	}
}
