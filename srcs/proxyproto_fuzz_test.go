package srcs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/sluice-io/sluice/srcs"
)

// FuzzReadProxyHeader feeds arbitrary bytes to the PROXY header reader:
// it must never panic, fail only with ErrProxyHeader, and on success have
// read the header and not one byte more, since the rest of the stream is
// read from the socket by a runner, and return what it read, for the
// parser (srcs/trust's FuzzProxyAddr).
func FuzzReadProxyHeader(f *testing.F) {
	for _, v := range []byte{1, 2} {
		for _, pair := range [][2]string{{"203.0.113.7:5555", "198.51.100.1:443"}, {"[2001:db8::7]:6000", "[2001:db8::1]:443"}} {
			sa, _ := net.ResolveTCPAddr("tcp", pair[0])
			da, _ := net.ResolveTCPAddr("tcp", pair[1])
			h, _ := proxyproto.HeaderProxyFromAddrs(v, sa, da).Format()
			f.Add(append(h, "payload"...))
		}
	}
	f.Add([]byte("PROXY UNKNOWN\r\nrest"))
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"))
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00data"))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		h, err := srcs.ReadProxyHeader(r)
		if err != nil {
			if !errors.Is(err, srcs.ErrProxyHeader) {
				t.Fatalf("error %v does not wrap ErrProxyHeader", err)
			}
			return
		}
		used := len(in) - r.Len()
		if !bytes.Equal(h, in[:used]) {
			t.Fatalf("returned %q, having read %q", h, in[:used])
		}
		switch {
		case bytes.HasPrefix(in, []byte("PROXY ")):
			if want := bytes.IndexByte(in, '\n') + 1; used != want {
				t.Fatalf("v1: read %d bytes, the header has %d", used, want)
			}
		default:
			if want := 16 + int(binary.BigEndian.Uint16(in[14:16])); used != want {
				t.Fatalf("v2: read %d bytes, the header has %d", used, want)
			}
		}
	})
}
