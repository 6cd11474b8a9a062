package engine_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/testca"
	"github.com/sluice-io/sluice/srcs"
)

// hostileCounts is what the hostile-peer test throws at a TLS listener and a
// PROXY listener, by kind, and how many of each.
type hostileCounts struct {
	plaintext, garbage, flood, slow, alien, forged atomic.Int64
}

// slowWriter writes one byte at a time with a pause between, as a peer
// on a bad link (or a slowloris) sends its ClientHello.
type slowWriter struct {
	net.Conn
	pause time.Duration
}

func (w slowWriter) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := w.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
		time.Sleep(w.pause) // the peer's pace, not synchronisation
	}
	return len(p), nil
}

// waitClosed reads c until the other side closes it (or 10s pass), then
// closes c: a hostile peer hangs on until the listener throws it out.
func waitClosed(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, c)
	c.Close()
}

// TestFaultHostilePeers runs, on every runner, well-behaved plaintext, TLS
// and proxied streams while hostile peers hit a TLS listener (client
// certificates required) and a PROXY listener: plaintext and garbage
// instead of a ClientHello, a flood of silent handshakes larger than
// max_handshakes, slow handshakes, client certificates from another CA,
// and PROXY headers from an address that is not a trusted proxy. Each
// hostile peer is refused: counted by its reason in the listener's stats,
// exactly, and logged with it. The other streams arrive byte-exact, and
// once the peers are gone no goroutine, descriptor or pool buffer is left
// behind for them.
func TestFaultHostilePeers(t *testing.T) {
	const (
		perKind = 20
		flood   = 100
		timeout = 2 * time.Second // long enough for a good handshake on a busy machine under -race
		good    = 8               // of each kind of well-behaved stream
	)
	ca, other := testca.New(t, "fault-trust"), testca.New(t, "stranger")
	srv := ca.Server(t, "server")
	client, alien := ca.Client(t, "sensor", "Acme"), other.Client(t, "intruder", "Elsewhere")
	forEachRunner(t, func(t *testing.T, runner string) {
		ignore := goleak.IgnoreCurrent()
		fds0 := openFDs(t)
		h := newHarness(t, runner, engine.Config{Workers: 2, Buffers: 256, BufSize: 16 << 10})
		tap := newLogTap()
		log := slog.New(tap)
		tlsLn, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{
			TLS:              &srcs.TLSConfig{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CAFile, ClientAuth: "require"},
			HandshakeTimeout: timeout, MaxHandshakes: 64, Logger: log,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.e.AddListener(tlsLn); err != nil {
			t.Fatal(err)
		}
		pxLn, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{
			ProxyProtocol: &srcs.ProxyProtocolConfig{Trusted: []string{"127.0.0.2"}}, HandshakeTimeout: timeout, Logger: log,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.e.AddListener(pxLn); err != nil {
			t.Fatal(err)
		}
		tlsAddr, pxAddr := tlsLn.Addr().String(), pxLn.Addr().String()
		// X25519 alone: the default hybrid post-quantum key exchange costs
		// several times the CPU, which a loaded machine under the race
		// detector may not give a good client within the timeout.
		curves := []tls.CurveID{tls.X25519}
		goodTLS := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{client.TLS}, CurvePreferences: curves}
		alienTLS := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", CurvePreferences: curves,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &alien.TLS, nil }}

		// The well-behaved streams, each tagged, random bytes in random
		// pieces. A proxied one comes from the trusted proxy and names an
		// original client of its own.
		var mu sync.Mutex
		want := map[string]sent{}
		names := map[string]string{} // key: the source name the stream must carry
		var pxSeq atomic.Int64
		send := func(kind string, i int) {
			var c net.Conn
			var err error
			name := ""
			switch kind {
			case "plain":
				c, err = net.Dial("tcp", h.addr)
			case "tls":
				var tc *tls.Conn
				tc, err = tls.Dial("tcp", tlsAddr, goodTLS)
				if err == nil {
					c, name = tc, "tls://"+tc.LocalAddr().String()+" [CN=sensor,O=Acme]"
				}
			case "proxied":
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
				c, err = d.Dial("tcp", pxAddr)
				if err == nil {
					orig := &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 10000 + int(pxSeq.Add(1))}
					var hdr []byte
					hdr, err = proxyproto.HeaderProxyFromAddrs(byte(1+i%2), orig, c.LocalAddr()).Format()
					if err == nil {
						_, err = c.Write(hdr)
					}
					name = "tcp://" + orig.String()
				}
			}
			if err != nil {
				t.Errorf("%s stream %d: %v", kind, i, err)
				return
			}
			tag, key := newTag()
			if _, err := c.Write(tag); err != nil {
				t.Errorf("%s stream %d: %v", kind, i, err)
				return
			}
			s, err := sendRandom(c, uint64(i)+1000*uint64(len(kind)), 256<<10)
			if err != nil {
				t.Errorf("%s stream %d: %v", kind, i, err)
			}
			mu.Lock()
			want[key], names[key] = s, name
			mu.Unlock()
		}

		// A first stream of each kind, so that what lives as long as the
		// engine (the goroutine runner TLS sources take, the listeners'
		// accept loops) is there before the baseline.
		for _, kind := range []string{"plain", "tls", "proxied"} {
			send(kind, 99)
		}
		waitCount(t, runner+": first streams not ended", 0, func() int { return 3 - h.col.endedCount() })
		waitCount(t, runner+": first sources", 0, func() int { return len(h.e.Stats().Sources) })
		fds1, g1 := openFDs(t), runtime.NumGoroutine()

		var hostile hostileCounts
		var wg sync.WaitGroup
		start := time.Now()
		for i := range good {
			for _, kind := range []string{"plain", "tls", "proxied"} {
				wg.Go(func() { send(kind, i) })
			}
		}
		// The flood: silent handshakes, more than max_handshakes at once.
		for range flood {
			c, err := net.Dial("tcp", tlsAddr)
			if err != nil {
				t.Fatal(err)
			}
			hostile.flood.Add(1)
			wg.Go(func() { waitClosed(c) })
		}
		rng := rand.New(rand.NewPCG(7, 8))
		dial := func(addr string) net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		for i := range perKind {
			plain := dial(tlsAddr)
			plain.Write([]byte("GET / HTTP/1.1\r\nHost: ingest\r\n\r\n"))
			hostile.plaintext.Add(1)
			wg.Go(func() { waitClosed(plain) })

			junk := make([]byte, 5+rng.IntN(2000))
			for j := range junk {
				junk[j] = byte(rng.Uint32())
			}
			junk[0] |= 0x80 // no TLS record type: refused at its header
			garbage := dial(tlsAddr)
			garbage.Write(junk)
			hostile.garbage.Add(1)
			wg.Go(func() { waitClosed(garbage) })

			slow := dial(tlsAddr)
			hostile.slow.Add(1)
			wg.Go(func() {
				// A real ClientHello, a byte every 20ms: never done in time.
				tc := tls.Client(slowWriter{slow, 20 * time.Millisecond}, goodTLS)
				tc.SetDeadline(time.Now().Add(10 * time.Second))
				if err := tc.Handshake(); err == nil {
					t.Error("a slow handshake finished")
				}
				slow.Close()
			})

			hostile.alien.Add(1)
			wg.Go(func() {
				tc, err := tls.Dial("tcp", tlsAddr, alienTLS)
				if err != nil {
					return // refused in the handshake
				}
				tc.Write([]byte("let me in"))
				waitClosed(tc)
			})

			// A PROXY header from 127.0.0.1, which is not the trusted proxy.
			forger := dial(pxAddr)
			forged := &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 4242}
			hdr, _ := proxyproto.HeaderProxyFromAddrs(byte(1+i%2), forged, forger.LocalAddr()).Format()
			forger.Write(append(hdr, "forged payload"...))
			hostile.forged.Add(1)
			wg.Go(func() { waitClosed(forger) })
		}
		wg.Wait()

		// Every hostile peer is counted by its reason, exactly.
		wantTLS := srcs.ListenerStats{Accepted: 1 + good, TLSFailures: uint64(hostile.plaintext.Load() + hostile.garbage.Load()),
			HandshakeTimeouts: uint64(hostile.flood.Load() + hostile.slow.Load()), CertRejected: uint64(hostile.alien.Load())}
		wantPx := srcs.ListenerStats{Accepted: 1 + good, ProxyRefused: uint64(hostile.forged.Load())}
		deadline := time.Now().Add(30 * time.Second)
		for {
			// A forged header that reached the PROXY listener after its
			// sniff grace (50ms, which a loaded machine under -race may
			// let pass between a forger's dial and its write) is refused
			// by the first Read of the source it became, with
			// srcs.ErrProxyUntrusted: that peer was accepted too.
			wantPx.Accepted = 1 + good + uint64(h.col.errCount(srcs.ErrProxyUntrusted))
			if tlsLn.Stats() == wantTLS && pxLn.Stats() == wantPx {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: TLS listener %+v, want %+v; PROXY listener %+v, want %+v", runner, tlsLn.Stats(), wantTLS, pxLn.Stats(), wantPx)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// And logged with it.
		for _, reason := range []string{"TLS handshake failed", "handshake timed out", "client certificate rejected", "PROXY header refused"} {
			recs := tap.matching(func(r logRec) bool {
				return strings.HasPrefix(r.msg, "srcs: connection refused") && strings.Contains(r.attrs, "reason="+reason)
			})
			if len(recs) == 0 {
				t.Errorf("%s: no refusal logged for %q", runner, reason)
			}
		}

		// The well-behaved streams arrived byte-exact, under their names.
		h.col.waitFor("every well-behaved stream's end", 60*time.Second, func(m map[string]*stream) bool {
			for key := range want {
				if s := m[key]; s == nil || !s.eos {
					return false
				}
			}
			return true
		})
		for key, w := range want {
			got := h.col.get(key)
			if got.bytes != w.bytes || got.crc != w.crc || len(got.errs) != 0 {
				t.Errorf("%s: %s: got %d bytes crc %08x errors %v; sent %d crc %08x", runner, key, got.bytes, got.crc, got.errs, w.bytes, w.crc)
			}
			if n := names[key]; n != "" && got.name != n {
				t.Errorf("%s: %s: source named %q, want %q", runner, key, got.name, n)
			}
		}

		// Nothing stays behind for the hostile peers.
		waitCount(t, runner+": live sources after the hostile peers", 0, func() int { return len(h.e.Stats().Sources) })
		waitPoolIdle(t, h.e, runner+": after the hostile peers")
		waitCount(t, runner+": descriptors open after the hostile peers", fds1, func() int { return openFDs(t) })
		waitCount(t, runner+": goroutines after the hostile peers", g1, runtime.NumGoroutine)
		t.Logf("%s: in %v, %d plaintext, %d garbage, %d silent (flood), %d slow, %d alien-certificate and %d forged-PROXY peers refused "+
			"and counted; %d well-behaved streams of each kind byte-exact; descriptors (%d) and goroutines (%d) back",
			runner, time.Since(start).Round(time.Millisecond), hostile.plaintext.Load(), hostile.garbage.Load(), hostile.flood.Load(),
			hostile.slow.Load(), hostile.alien.Load(), hostile.forged.Load(), good, fds1, g1)

		h.shutdown()
		goleak.VerifyNone(t, ignore)
		waitCount(t, runner+": descriptors open after shutdown", fds0, func() int { return openFDs(t) })
	})
}

// errCount returns how many sources reported an error matching target.
func (c *collector) errCount(target error) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.byID {
		if slices.ContainsFunc(s.errs, func(err error) bool { return errors.Is(err, target) }) {
			n++
		}
	}
	return n
}
