package synthetic_test

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/internal/testkit/synthetic"
	"github.com/sluice-io/sluice/srcs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func newSynthetic(t *testing.T, cfg synthetic.Config) *synthetic.Source {
	t.Helper()
	s, err := synthetic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readDigest reads src to its end through Read, in reads of at most
// bufSize bytes, and returns the byte count and CRC-32C.
func readDigest(t *testing.T, src io.Reader, bufSize int) (int64, uint32) {
	t.Helper()
	buf := make([]byte, bufSize)
	var total int64
	var crc uint32
	for {
		n, err := src.Read(buf)
		total += int64(n)
		crc = crc32.Update(crc, castagnoli, buf[:n])
		if err == io.EOF {
			return total, crc
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", total, err)
		}
	}
}

func TestSyntheticDigest(t *testing.T) {
	tests := []struct {
		name string
		cfg  synthetic.Config
		buf  int
		desc bool
	}{
		{"empty", synthetic.Config{Total: 0, Seed: 1}, 4096, false},
		{"one byte", synthetic.Config{Total: 1, Seed: 2}, 4096, false},
		{"odd sizes", synthetic.Config{Total: 100_003, Seed: 3, MaxWrite: 777}, 333, false},
		{"default writes", synthetic.Config{Total: 4 << 20, Seed: 4}, 64 << 10, false},
		{"through Desc", synthetic.Config{Total: 1 << 20, Seed: 5, MaxWrite: 10_000}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSynthetic(t, tt.cfg)
			if err := s.Open(context.Background()); err != nil {
				t.Fatal(err)
			}
			var n int64
			var crc uint32
			if tt.desc {
				data := srcstest.ReadDesc(t, s)
				n, crc = int64(len(data)), crc32.Checksum(data, castagnoli)
				if _, err := s.Read(make([]byte, 1)); err == nil {
					t.Error("Read after Desc succeeded")
				}
			} else {
				n, crc = readDigest(t, s, tt.buf)
			}
			wn, wcrc := s.Digest()
			if n != wn || crc != wcrc || wn != tt.cfg.Total {
				t.Errorf("read %d bytes crc %#x; Digest says %d bytes crc %#x; Total %d", n, crc, wn, wcrc, tt.cfg.Total)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSyntheticDeterministic checks that the bytes depend on the seed
// alone, not on MaxWrite or on the session.
func TestSyntheticDeterministic(t *testing.T) {
	a := newSynthetic(t, synthetic.Config{Total: 50_000, Seed: 9, MaxWrite: 13})
	b := newSynthetic(t, synthetic.Config{Total: 50_000, Seed: 9, MaxWrite: 60_000})
	c := newSynthetic(t, synthetic.Config{Total: 50_000, Seed: 10})
	_, ca := a.Digest()
	_, cb := b.Digest()
	_, cc := c.Digest()
	if ca != cb {
		t.Errorf("same seed, different MaxWrite: crc %#x != %#x", ca, cb)
	}
	if ca == cc {
		t.Errorf("seeds 9 and 10 gave the same crc %#x", ca)
	}
	for i := range 2 {
		if err := a.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, crc := readDigest(t, a, 1000); crc != ca {
			t.Errorf("session %d: crc %#x, want %#x", i, crc, ca)
		}
		a.Close()
	}
}

func TestSyntheticRate(t *testing.T) {
	const total, rate = 60_000, 300_000 // 200ms
	s := newSynthetic(t, synthetic.Config{Total: total, Seed: 1, MaxWrite: 1000, Rate: rate})
	start := time.Now()
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, _ := readDigest(t, s, 4096)
	el := time.Since(start)
	// The last write starts at (total-last)/rate at the earliest.
	if min := time.Duration((total - 1000) * int64(time.Second) / rate); el < min {
		t.Errorf("read %d bytes at %d B/s in %v, want at least %v", n, rate, el, min)
	}
	if el > 5*time.Second {
		t.Errorf("pacing far too slow: %v", el)
	}
}

// TestSyntheticCloseMidStream closes a session whose writer is blocked on
// a full socket (nobody reads), and one whose Read is blocked waiting for
// a slow writer; both must end promptly, leaving no goroutine (goleak).
func TestSyntheticCloseMidStream(t *testing.T) {
	t.Run("writer blocked", func(t *testing.T) {
		s := newSynthetic(t, synthetic.Config{Total: 1 << 30, Seed: 1})
		if err := s.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1000)
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
		closeWithin(t, s, 5*time.Second)
	})
	t.Run("reader blocked", func(t *testing.T) {
		s := newSynthetic(t, synthetic.Config{Total: 100, Seed: 1, MaxWrite: 1, Rate: 1})
		if err := s.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := io.ReadAll(s)
			done <- err
		}()
		time.Sleep(20 * time.Millisecond) // let Read block; the test passes either way
		closeWithin(t, s, 5*time.Second)
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("blocked Read ended with %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock Read")
		}
	})
	t.Run("deadline", func(t *testing.T) {
		s := newSynthetic(t, synthetic.Config{Total: 100, Seed: 1, MaxWrite: 1, Rate: 1})
		if err := s.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if _, err := s.Read(buf); err != nil { // the first byte is due at once
			t.Fatal(err)
		}
		s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := s.Read(buf); !errors.Is(driver.Classify(err), srcs.ErrTimeout) {
			t.Errorf("Read past deadline = %v, want a timeout", err)
		}
	})
}

func closeWithin(t *testing.T, s *synthetic.Source, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("Close did not return within %v", d)
	}
}

func TestSyntheticConfig(t *testing.T) {
	for _, cfg := range []synthetic.Config{{Total: -1}, {MaxWrite: -1}, {Rate: -1}} {
		if _, err := synthetic.New(cfg); err == nil || !strings.HasPrefix(err.Error(), "synthetic: ") {
			t.Errorf("NewSynthetic(%+v) = %v, want an error", cfg, err)
		}
	}
	s := newSynthetic(t, synthetic.Config{Seed: 42})
	if s.Name() != "synthetic://42" {
		t.Errorf("Name = %q", s.Name())
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read before Open = %v, want net.ErrClosed", err)
	}
	if _, ok := any(s).(contract.Descriptor); !ok {
		t.Error("Synthetic is not a Descriptor")
	}
}

func BenchmarkSyntheticRead(b *testing.B) {
	const total = 64 << 20
	s, err := synthetic.New(synthetic.Config{Total: total, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	b.SetBytes(total)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Open(context.Background()); err != nil {
			b.Fatal(err)
		}
		for {
			_, err := s.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
	}
}
