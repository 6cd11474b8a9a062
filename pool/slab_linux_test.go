//go:build linux

package pool

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rss returns the process's resident memory, from /proc/self/statm.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no statm: %v", err)
	}
	pages, err := strconv.ParseInt(strings.Fields(string(b))[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// TestSlabResidency: by default the slab's pages become resident only as
// buffers are written, so a new pool costs next to nothing; Prefault
// makes all of them resident at New. The slab is large (32 MiB) against
// what else the process may touch meanwhile, and the bounds are half of
// it apart, so the test does not depend on timing.
func TestSlabResidency(t *testing.T) {
	const bufs, size = 512, 64 << 10
	const slab = bufs * size
	for _, tc := range []struct {
		name     string
		prefault bool
		min, max int64 // growth of RSS across New
	}{
		{"default", false, 0, slab / 4},
		{"prefault", true, slab * 3 / 4, 1 << 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rss(t)
			p := newPool(t, Config{BufSize: size, Buffers: bufs, Prefault: tc.prefault})
			if d := rss(t) - before; d < tc.min || d > tc.max {
				t.Fatalf("RSS grew by %d KiB at New, want %d to %d KiB", d>>10, tc.min>>10, tc.max>>10)
			}
			if got := p.Config().Prefault; got != tc.prefault {
				t.Fatalf("Config().Prefault = %v", got)
			}
		})
	}
}

// TestReturnAfter: the pages of buffers that stay free for ReturnAfter go
// back to the kernel, and the slab's resident memory falls by them; a
// buffer lent out again works, zeroed; one in steady use stays resident.
// A prefaulted pool, or a negative ReturnAfter, keeps every page.
func TestReturnAfter(t *testing.T) {
	const bufs, size = 512, 64 << 10
	const slab = bufs * size
	const tick = 50 * time.Millisecond
	for _, tc := range []struct {
		name    string
		cfg     Config
		returns bool
	}{
		{"returned", Config{ReturnAfter: tick}, true},
		{"negative keeps", Config{ReturnAfter: -1}, false},
		{"prefault keeps", Config{ReturnAfter: tick, Prefault: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.BufSize, cfg.Buffers, cfg.MaxPerSource = size, bufs, bufs
			p := newPool(t, cfg)
			a, hot := p.Join(1), p.Join(2)
			var held []*Buf
			for range bufs {
				b, ok := a.TryAcquire()
				if !ok {
					t.Fatal("no buffer")
				}
				for i := 0; i < size; i += os.Getpagesize() {
					b.Bytes()[i] = 0x5a // a byte a page makes it resident
				}
				b.Bytes()[size-1] = 0x5a
				held = append(held, b)
			}
			burst := slabRSS(t, p)
			for _, b := range held {
				b.Release()
			}
			if st := p.Stats(); st.Resident != bufs {
				t.Fatalf("after the burst: %d buffers resident, want %d", st.Resident, bufs)
			}
			if !tc.returns {
				time.Sleep(4 * tick) // three ticks and more: nothing goes
				if st := p.Stats(); st.Resident != bufs || st.Returned != 0 {
					t.Fatalf("pages given back: %+v", st)
				}
				return
			}
			// One buffer in steady use while the rest go back.
			deadline := time.Now().Add(10 * time.Second)
			for p.Stats().Resident > 1 {
				if time.Now().After(deadline) {
					t.Fatalf("the pages never went back: %+v", p.Stats())
				}
				b, ok := hot.TryAcquire()
				if !ok {
					t.Fatal("no buffer for the buffer in steady use")
				}
				b.Bytes()[0] = 1
				b.Release()
				time.Sleep(tick / 10)
			}
			st := p.Stats()
			if st.Resident != 1 || st.Returned < bufs-1 {
				t.Fatalf("after the quiet while: %+v", st)
			}
			after := slabRSS(t, p)
			if burst < slab*3/4 || after > slab/8 {
				t.Errorf("the slab's resident memory: %d KiB after the burst, %d KiB once its pages went back; it is %d KiB", burst>>10, after>>10, slab>>10)
			}
			// Every buffer works again, zeroed where its pages went back.
			zeroed := 0
			for range bufs {
				b, ok := a.TryAcquire()
				if !ok {
					t.Fatal("no buffer after the return")
				}
				if b.Bytes()[size-1] == 0 {
					zeroed++
				}
				b.Bytes()[size-1] = 7
				if b.Bytes()[size-1] != 7 {
					t.Fatal("a buffer lent out again does not keep what is written")
				}
				held[b.Index()] = b
			}
			if zeroed < bufs-1 {
				t.Errorf("%d buffers read zero after their pages went back, want %d", zeroed, bufs-1)
			}
			for _, b := range held {
				b.Release()
			}
		})
	}
}

// slabRSS returns the resident memory of the mapping that holds p's slab,
// from /proc/self/smaps: the process's whole resident set moves with the
// runtime's own memory (the race detector's most of all).
func slabRSS(t *testing.T, p *Pool) int64 {
	t.Helper()
	addr, err := strconv.ParseUint(strings.TrimPrefix(fmt.Sprintf("%p", &p.slab[0]), "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = l <= addr && addr < h
				continue
			}
		}
		if in && f[0] == "Rss:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping holds the slab at %#x", addr)
	return 0
}
