package engine

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestReleaseCopiesOfAChunk: a chunk is a value, and releasing any copy
// of it, any number of times, returns its buffer once. A copy released
// late frees nothing, even when the buffer has gone to another source
// meanwhile, whose bytes stay intact.
func TestReleaseCopiesOfAChunk(t *testing.T) {
	for _, tc := range []struct {
		name string
		// relend has another source take the buffer before the copy is
		// released.
		relend bool
	}{
		{"copy released while the buffer is free", false},
		{"copy released after the buffer went to another source", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ss := chunkPathEngine(t, 2)
			ctx := context.Background()
			emitOne(t, ss[0], time.Now())
			c, err := e.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cp := c
			c.Release()
			c.Release()
			var other Chunk
			if tc.relend {
				b, ok := ss[1].lane.Account.TryAcquire()
				if !ok {
					t.Fatal("no buffer")
				}
				if b != cp.buf {
					t.Fatal("the pool lent another buffer: the test needs the released one")
				}
				copy(b.Bytes(), bytes.Repeat([]byte{7}, len(b.Bytes())))
				ss[1].Emit(&ss[1].lane, b, len(b.Bytes()), 0, time.Now())
				if other, err = e.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cp.Release()
			st := e.Pool().Stats()
			want := 0
			if tc.relend {
				want = 1
			}
			if st.InUse != want || st.StaleReleases != 1 {
				t.Fatalf("after releasing the copy: %d buffers in use (want %d), %d stale releases (want 1)",
					st.InUse, want, st.StaleReleases)
			}
			if tc.relend {
				if bytes.Count(other.Data, []byte{7}) != len(other.Data) {
					t.Fatal("the other source's bytes changed under it")
				}
				other.Release()
			}
		})
	}
}
