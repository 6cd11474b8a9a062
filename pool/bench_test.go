package pool

import (
	"context"
	"testing"
)

// BenchmarkAcquireRelease is the uncontended fast path every chunk takes:
// one TryAcquire and one Release by the same goroutine.
func BenchmarkAcquireRelease(b *testing.B) {
	p := newPool(b, Config{BufSize: 64 << 10, Buffers: 64})
	a := p.Join(1)
	defer a.Leave()
	b.ReportAllocs()
	for b.Loop() {
		buf, ok := a.TryAcquire()
		if !ok {
			b.Fatal("acquire failed")
		}
		buf.Release()
	}
}

// BenchmarkContendedHandoff measures one buffer shared by two sources on
// two goroutines, each acquiring with the blocking form and releasing at
// once. Whenever they collide, the buffer is handed over through the wait
// queue; waits/op reports how often that happened.
func BenchmarkContendedHandoff(b *testing.B) {
	p := newPool(b, Config{BufSize: 4096, Buffers: 1})
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		other := p.Join(2)
		defer other.Leave()
		for {
			select {
			case <-stop:
				return
			default:
			}
			buf, err := other.Acquire(ctx)
			if err != nil {
				return
			}
			buf.Release()
		}
	}()
	a := p.Join(1)
	b.ReportAllocs()
	for b.Loop() {
		buf, err := a.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		buf.Release()
	}
	close(stop)
	<-done
	a.Leave()
	b.ReportMetric(float64(a.Stats().Waits)/float64(b.N), "waits/op")
}
