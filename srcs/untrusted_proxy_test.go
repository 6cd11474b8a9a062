package srcs_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// TestUntrustedFirstBytes: on a PROXY listener, an untrusted client that
// sends nothing at first is not held for the handshake timeout: Accept
// returns it at once. Its first bytes are checked whenever they come: a
// PROXY header, v1 or v2, fails its Read and is counted, and is never
// delivered as data; anything else is data. A client that writes before
// it is accepted is decided by the listener and keeps its descriptor.
func TestUntrustedFirstBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		early   bool   // write before Accept is called
		send    []byte // written after Accept returned (or before, if early)
		refused bool   // Read must fail with ErrProxyUntrusted
		want    string // else, everything read
	}{
		{name: "v2 header after a silence", send: append(proxyHeader(t, 2, "203.0.113.9:1", "198.51.100.1:443"), "forged\n"...), refused: true},
		{name: "v1 header after a silence", send: append(proxyHeader(t, 1, "203.0.113.9:1", "198.51.100.1:443"), "forged\n"...), refused: true},
		{name: "data after a silence", send: []byte("hello\nworld\n"), want: "hello\nworld\n"},
		{name: "a prefix of v1 that is data", send: []byte("PROXIMA centauri\n"), want: "PROXIMA centauri\n"},
		{name: "a prefix of v2 that is data", send: []byte("\r\n\r\nhello\n"), want: "\r\n\r\nhello\n"},
		{name: "a short line", send: []byte("x"), want: "x"},
		{name: "data before accept", early: true, send: []byte("early\n"), want: "early\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := srcs.ListenerConfig{
				ProxyProtocol: &srcs.ProxyProtocolConfig{Trusted: []string{"127.0.0.2/32"}},
				// Far longer than the test may take: Accept must not wait
				// for it.
				HandshakeTimeout: time.Hour,
			}
			l := listen(t, "127.0.0.1:0", cfg)
			c := dialFrom(t, "127.0.0.1", l.Addr())
			defer c.Close()
			if tc.early {
				c.Write(tc.send)
				c.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			src, err := l.AcceptSource(ctx)
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			ac := src.(accepted)
			defer ac.Close()
			if tc.early {
				if ac.Encrypted() {
					t.Fatal("a connection decided at accept lost its descriptor")
				}
				if got := srcstest.ReadDesc(t, ac); string(got) != tc.want {
					t.Fatalf("read %q, want %q", got, tc.want)
				}
				return
			}
			if !ac.Encrypted() {
				t.Fatal("an undecided connection offers its descriptor to be read raw")
			}
			if _, err := ac.Desc(); !errors.Is(err, srcs.ErrNoDescriptor) {
				t.Fatalf("Desc: %v, want ErrNoDescriptor", err)
			}
			c.Write(tc.send)
			c.Close()
			got, err := io.ReadAll(ac)
			if tc.refused {
				if !errors.Is(err, srcs.ErrProxyUntrusted) || len(got) > 0 {
					t.Fatalf("read %q, %v; want nothing and ErrProxyUntrusted", got, err)
				}
				if st := l.Stats(); st.ProxyRefused != 1 {
					t.Fatalf("stats %+v: the refusal is not counted", st)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("read %q, %v; want %q", got, err, tc.want)
			}
			if st := l.Stats(); st.ProxyRefused != 0 || st.Accepted != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
