package srcs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/sluice-io/sluice/internal/runner/driver"
	"github.com/sluice-io/sluice/srcs"
)

func TestForEachDatagram(t *testing.T) {
	frame := func(ps ...string) []byte {
		var b []byte
		for _, p := range ps {
			b = driver.AppendDatagram(b, []byte(p))
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		want    []string
		wantErr bool
	}{
		{"empty chunk", nil, nil, false},
		{"one", frame("hello"), []string{"hello"}, false},
		{"several", frame("a", "bc", "def"), []string{"a", "bc", "def"}, false},
		{"empty datagrams", frame("", "x", ""), []string{"", "x", ""}, false},
		{"little endian", []byte{2, 0, 0, 0, 'h', 'i'}, []string{"hi"}, false},
		{"short header", []byte{1, 0, 0}, nil, true},
		{"short header after a datagram", append(frame("ok"), 0, 0), []string{"ok"}, true},
		{"payload cut short", append(frame("ok"), 5, 0, 0, 0, 'a', 'b'), []string{"ok"}, true},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 'a'}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := srcs.ForEachDatagram(tc.data, func(p []byte) bool {
				got = append(got, string(p))
				return true
			})
			if tc.wantErr != (err != nil) || err != nil && !errors.Is(err, srcs.ErrMalformedDatagrams) {
				t.Errorf("err = %v, want error: %v (wrapping ErrMalformedDatagrams)", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("datagram %d = %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestForEachDatagramStops(t *testing.T) {
	data := driver.AppendDatagram(driver.AppendDatagram(nil, []byte("a")), []byte("b"))
	data = append(data, 9) // malformed tail, never reached
	n := 0
	err := srcs.ForEachDatagram(data, func([]byte) bool { n++; return false })
	if err != nil || n != 1 {
		t.Errorf("stopped after %d datagrams with %v, want 1 and nil", n, err)
	}
}

// TestForEachDatagramAliases checks that a payload is capped at its end, so
// appending to it cannot overwrite the next datagram.
func TestForEachDatagramAliases(t *testing.T) {
	data := driver.AppendDatagram(driver.AppendDatagram(nil, []byte("ab")), []byte("cd"))
	var first []byte
	srcs.ForEachDatagram(data, func(p []byte) bool { first = p; return false })
	if cap(first) != 2 {
		t.Errorf("cap(payload) = %d, want 2", cap(first))
	}
	_ = append(first, 'X')
	if !bytes.Equal(data[6:8], []byte{2, 0}) {
		t.Errorf("append to a payload overwrote the next header: % x", data)
	}
}

type sized struct {
	srcs.Source
	max int
}

func (s sized) MaxDatagram() int { return s.max }

type noSrc struct{}

func (noSrc) Name() string               { return "none" }
func (noSrc) Open(context.Context) error { return nil }
func (noSrc) Read([]byte) (int, error)   { return 0, nil }
func (noSrc) Close() error               { return nil }

func TestDatagramLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  srcs.Source
		buf  int
		want int
	}{
		{"default, big buffer", noSrc{}, 1 << 20, srcs.MaxUDPPayload},
		{"default, buffer caps", noSrc{}, 8 << 10, 8<<10 - 4},
		{"sizer", sized{noSrc{}, 1472}, 64 << 10, 1472},
		{"sizer above buffer", sized{noSrc{}, 65535}, 4 << 10, 4<<10 - 4},
		{"sizer zero", sized{noSrc{}, 0}, 4 << 10, 1},
	} {
		if got := driver.DatagramLimit(tc.src, tc.buf); got != tc.want {
			t.Errorf("%s: DatagramLimit = %d, want %d", tc.name, got, tc.want)
		}
	}
	buf := make([]byte, 100)
	for _, tc := range []struct{ n, want int }{{0, 96}, {90, 6}, {96, 0}, {100, 0}} {
		if got := driver.DatagramSpace(buf, tc.n); got != tc.want {
			t.Errorf("DatagramSpace(100, %d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	h := make([]byte, 4)
	driver.PutDatagramHeader(h, 0x01020304)
	if !bytes.Equal(h, []byte{4, 3, 2, 1}) {
		t.Errorf("PutDatagramHeader = % x, want little endian", h)
	}
}

// FuzzForEachDatagram checks that the decoder never panics, that whatever it
// accepts re-encodes to the same bytes, and that what the encoder writes
// decodes to the datagrams it was given.
func FuzzForEachDatagram(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{3, 0, 0, 0, 'a', 'b', 'c'}, []byte{1, 2})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0}, []byte{0, 0, 5})
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f}, []byte{200})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		// Arbitrary input: decode, and re-encode what was decoded.
		var again []byte
		err := srcs.ForEachDatagram(data, func(p []byte) bool {
			if len(p) > len(data) {
				t.Fatalf("payload of %d bytes from a %d-byte chunk", len(p), len(data))
			}
			again = driver.AppendDatagram(again, p)
			return true
		})
		switch {
		case err == nil && !bytes.Equal(again, data):
			t.Fatalf("accepted % x but re-encodes to % x", data, again)
		case err != nil && !errors.Is(err, srcs.ErrMalformedDatagrams):
			t.Fatalf("error %v does not wrap ErrMalformedDatagrams", err)
		case err != nil && (len(again) >= len(data) || !bytes.Equal(again, data[:len(again)])):
			t.Fatalf("rejected % x after datagrams that re-encode to % x", data, again)
		}

		// Encoder output: cut data into datagrams at the lengths in cuts.
		var sent [][]byte
		var chunk []byte
		rest := data
		for _, c := range cuts {
			n := min(int(c), len(rest))
			sent = append(sent, rest[:n])
			chunk = driver.AppendDatagram(chunk, rest[:n])
			rest = rest[n:]
		}
		i := 0
		if err := srcs.ForEachDatagram(chunk, func(p []byte) bool {
			if i >= len(sent) || !bytes.Equal(p, sent[i]) {
				t.Fatalf("datagram %d = % x, want one of %d sent", i, p, len(sent))
			}
			i++
			return true
		}); err != nil || i != len(sent) {
			t.Fatalf("decoded %d of %d datagrams the encoder wrote: %v", i, len(sent), err)
		}
	})
}
