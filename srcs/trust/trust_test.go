package trust_test

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/sluice-io/sluice/internal/wire/trusthook"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/trust"
)

// FuzzProxyAddr feeds arbitrary bytes, as a listener read them whole, to
// the PROXY header parser: it must never panic, and the address of a
// header it accepts is the one a proxy wrote.
func FuzzProxyAddr(f *testing.F) {
	for _, v := range []byte{1, 2} {
		for _, pair := range [][2]string{{"203.0.113.7:5555", "198.51.100.1:443"}, {"[2001:db8::7]:6000", "[2001:db8::1]:443"}} {
			sa, _ := net.ResolveTCPAddr("tcp", pair[0])
			da, _ := net.ResolveTCPAddr("tcp", pair[1])
			h, _ := proxyproto.HeaderProxyFromAddrs(v, sa, da).Format()
			f.Add(h)
		}
	}
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"))
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"))
	p := trusthook.Get()
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := p.ProxyAddr(in)
		if err != nil || a == nil {
			return
		}
		h, err := proxyproto.Read(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			t.Fatalf("ProxyAddr(%q) = %v; the header does not parse: %v", in, a, err)
		}
		if src, _, ok := h.TCPAddrs(); !ok || src.String() != a.String() {
			t.Fatalf("ProxyAddr(%q) = %v, the header names %v", in, a, src)
		}
	})
}

// TestLinked: with this package linked, srcs serves TLS and the PROXY
// protocol (srcs's own tests run them), and ClientConfig checks a client's
// tls section as srcs does.
func TestLinked(t *testing.T) {
	if trusthook.Get() == nil {
		t.Fatal("importing srcs/trust registered nothing")
	}
	_, err := trust.ClientConfig(&srcs.TLSConfig{ClientAuth: srcs.ClientAuthRequire}, "example.org")
	if err == nil || !strings.Contains(err.Error(), "tls.client_auth: for listeners, not clients") {
		t.Errorf("ClientConfig with client_auth: %v", err)
	}
	tc, err := trust.ClientConfig(&srcs.TLSConfig{MinVersion: "1.3"}, "example.org")
	if err != nil || tc.ServerName != "example.org" || tc.MinVersion != 0x0304 {
		t.Errorf("ClientConfig: %+v, %v", tc, err)
	}
}
