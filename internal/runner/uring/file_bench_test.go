//go:build linux

package uring

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkFileRead64K compares the kernel's cost of reading a page-cached
// file in 64 KiB pieces: pread(2), io_uring READ into plain memory, and
// READ_FIXED into registered memory, with 1 or 8 reads per
// io_uring_enter. It bounds what the uring runner's file lanes can reach
// against fio's psync engine (which is pread).
func BenchmarkFileRead64K(b *testing.B) {
	const size, bs = 16 << 20, 64 << 10
	path := filepath.Join(b.TempDir(), "file")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	mem, err := unix.Mmap(-1, 0, 8*bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	report := func(b *testing.B, reads int) {
		b.ReportMetric(float64(reads)*bs/b.Elapsed().Seconds()/(1<<30), "GiB/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(reads), "ns/read")
	}

	b.Run("pread", func(b *testing.B) {
		off, reads := int64(0), 0
		for b.Loop() {
			if _, err := unix.Pread(fd, mem[:bs], off); err != nil {
				b.Fatal(err)
			}
			off = (off + bs) % size
			reads++
		}
		report(b, reads)
	})
	for _, fixed := range []bool{false, true} {
		for _, depth := range []int{1, 8} {
			name := fmt.Sprintf("uring/fixed=%v/depth=%d", fixed, depth)
			b.Run(name, func(b *testing.B) {
				r := benchRing(b, Config{Entries: 16})
				if fixed {
					iov := unix.Iovec{Base: unsafe.SliceData(mem)}
					iov.SetLen(len(mem))
					if err := r.RegisterBuffers([]unix.Iovec{iov}); err != nil {
						b.Skip(err)
					}
				}
				b.ReportAllocs()
				off, reads := int64(0), 0
				for b.Loop() {
					for i := range depth {
						s := r.GetSQE()
						p := mem[i*bs : (i+1)*bs]
						if fixed {
							s.PrepReadFixed(fd, p, uint64(off), 0)
						} else {
							s.PrepRead(fd, p, uint64(off))
						}
						off = (off + bs) % size
					}
					if _, err := r.SubmitAndWait(uint32(depth)); err != nil {
						b.Fatal(err)
					}
					reads += r.ForEachCQE(func(c *CQE) {
						if c.Res != bs {
							b.Fatalf("read returned %d", c.Res)
						}
					})
				}
				report(b, reads)
			})
		}
	}
}
