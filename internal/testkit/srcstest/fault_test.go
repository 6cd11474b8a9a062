package srcstest_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/internal/testkit/synthetic"
	"github.com/sluice-io/sluice/srcs"
)

func newSynthetic(t *testing.T, total int64) *synthetic.Source {
	t.Helper()
	s, err := synthetic.New(synthetic.Config{Total: total, Seed: 7, MaxWrite: 5000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestFaultyCapabilities(t *testing.T) {
	client, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	file, err := srcs.NewFile(srcs.FileConfig{Path: "/nonexistent", Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		src              srcs.Source
		deadline, reconn bool
	}{
		{"synthetic", newSynthetic(t, 1), true, false},
		{"tcp client", client, true, true},
		{"file", file, false, false},
		{"plain reconnector", struct {
			srcs.Source
			srcs.Reconnector
		}{file, client}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := srcstest.Faulty(tt.src, srcstest.Faults{})
			if _, ok := f.(contract.Descriptor); ok {
				t.Error("Faulty exposes Descriptor, which would bypass the faults")
			}
			if _, ok := f.(srcs.Repeater); ok {
				t.Error("Faulty exposes Repeater")
			}
			if _, ok := f.(srcs.Deadliner); ok != tt.deadline {
				t.Errorf("Deadliner = %v, want %v", ok, tt.deadline)
			}
			if _, ok := f.(srcs.Reconnector); ok != tt.reconn {
				t.Errorf("Reconnector = %v, want %v", ok, tt.reconn)
			}
			if f.Name() != tt.src.Name() {
				t.Errorf("Name = %q, want %q", f.Name(), tt.src.Name())
			}
		})
	}
}

func TestFaultyOpen(t *testing.T) {
	myErr := errors.New("boom")
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"default error", nil, syscall.ECONNREFUSED},
		{"given error", myErr, myErr},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSynthetic(t, 10)
			f := srcstest.Faulty(s, srcstest.Faults{FailOpens: 2, OpenErr: tt.err})
			for i := range 2 {
				if err := f.Open(context.Background()); !errors.Is(err, tt.want) {
					t.Fatalf("Open %d = %v, want %v", i, err, tt.want)
				}
				if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
					t.Fatalf("a failed Open opened the source: Read = %v", err)
				}
			}
			if err := f.Open(context.Background()); err != nil {
				t.Fatalf("third Open = %v", err)
			}
			if b, err := io.ReadAll(f); err != nil || len(b) != 10 {
				t.Fatalf("ReadAll = %d bytes, %v", len(b), err)
			}
		})
	}
}

func TestFaultyShortReads(t *testing.T) {
	s := newSynthetic(t, 100_000)
	f := srcstest.Faulty(s, srcstest.Faults{MaxRead: 100})
	if err := f.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var total int64
	var crc uint32
	for {
		n, err := f.Read(buf)
		if n > 100 {
			t.Fatalf("Read returned %d bytes past MaxRead 100", n)
		}
		total += int64(n)
		crc = crc32.Update(crc, srcstest.Castagnoli, buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if wn, wcrc := s.Digest(); total != wn || crc != wcrc {
		t.Errorf("read %d bytes crc %#x, want %d crc %#x", total, crc, wn, wcrc)
	}
}

func TestFaultyReadError(t *testing.T) {
	reset := fmt.Errorf("injected: %w", syscall.ECONNRESET)
	for _, after := range []int64{0, 1, 4999, 5000, 12_345} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			s := newSynthetic(t, 50_000)
			f := srcstest.Faulty(s, srcstest.Faults{ReadErr: reset, ErrAfter: after, MaxRead: 3000})
			if err := f.Open(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got int64
			buf := make([]byte, 8192)
			var err error
			for err == nil {
				var n int
				n, err = f.Read(buf)
				got += int64(n)
			}
			if !errors.Is(err, reset) || !errors.Is(driver.Classify(err), srcs.ErrReset) {
				t.Fatalf("read ended with %v, want the injected reset", err)
			}
			if got != after {
				t.Errorf("%d bytes before the error, want %d", got, after)
			}
			if _, err := f.Read(buf); !errors.Is(err, reset) {
				t.Errorf("Read after the fault = %v, want it again", err)
			}
			// The fault fires once: the next session reads everything.
			f.Close()
			if err := f.Open(context.Background()); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(f)
			if err != nil || len(b) != 50_000 {
				t.Errorf("second session: %d bytes, %v; want all 50000", len(b), err)
			}
		})
	}
}

// TestFaultyDeadline checks that the wrapper forwards SetReadDeadline to a
// blocked Read of the wrapped source.
func TestFaultyDeadline(t *testing.T) {
	s, err := synthetic.New(synthetic.Config{Total: 10, Seed: 1, MaxWrite: 1, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := srcstest.Faulty(s, srcstest.Faults{})
	if err := f.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	f.Read(buf) // the first byte is due at once
	f.(srcs.Deadliner).SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := f.Read(buf); !errors.Is(driver.Classify(err), srcs.ErrTimeout) {
		t.Errorf("Read past deadline = %v, want a timeout", err)
	}
}

func TestReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The client reads the data first, so the RST is what ends its stream.
	buf := make([]byte, 5)
	if _, err := io.ReadFull(cl, buf); err != nil {
		t.Fatal(err)
	}
	if err := srcstest.Reset(sc.(*net.TCPConn)); err != nil {
		t.Fatal(err)
	}
	cl.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = cl.Read(buf)
	if !errors.Is(driver.Classify(err), srcs.ErrReset) {
		t.Errorf("peer read after Reset = %v, want a reset (an orderly close gives io.EOF)", err)
	}
}

func TestFaultyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := srcs.NewFile(srcs.FileConfig{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	f := srcstest.Faulty(file, srcstest.Faults{MaxRead: 7})
	if err := f.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil || len(b) != 1000 {
		t.Errorf("ReadAll = %d bytes, %v", len(b), err)
	}
}
