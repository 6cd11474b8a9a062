package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"sync"
	"time"
)

// genTLSConfig is the generator's client configuration: the run's CA,
// and the server name its certificate holds.
func genTLSConfig(caFile string) (*tls.Config, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--tls-ca: %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}, nil
}

// tlsHandshake runs a dialled connection's TLS handshake within the dial
// timeout.
func tlsHandshake(ctx context.Context, c net.Conn, cfg *tls.Config) (*tls.Conn, error) {
	tc := tls.Client(c, cfg)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// tlsSession names a session's version and cipher suite for the report.
func tlsSession(c net.Conn) string {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return ""
	}
	cs := tc.ConnectionState()
	return tls.VersionName(cs.Version) + " " + tls.CipherSuiteName(cs.CipherSuite)
}

// runTLSBulk sends, for the duration from start, as fast as the sink takes
// it, on every connection of gcs through its TLS session in conns, one
// goroutine each, and returns the writes that sent bytes and the messages
// written. Each write is the connection's whole template (whole messages,
// so every stream ends on a message boundary), its headers stamped just
// before it as the shards stamp theirs; a write blocks until crypto/tls
// has handed every record to the kernel.
func runTLSBulk(gcs []*genConn, conns []net.Conn, size int, framed, crc bool, start time.Time, dur time.Duration) (writes, msgs uint64) {
	end := start.Add(dur).UnixNano()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, gc := range gcs {
		tc := conns[i].(*tls.Conn)
		wg.Go(func() {
			var w, m uint64
			for !gc.dead {
				now := time.Now().UnixNano()
				if now >= end {
					break
				}
				if !framed {
					for j := 0; j < len(gc.tmpl); j += size {
						binary.LittleEndian.PutUint64(gc.tmpl[j+SentOff:], uint64(now))
						binary.LittleEndian.PutUint64(gc.tmpl[j+SchedOff:], uint64(now))
					}
				}
				n, err := tc.Write(gc.tmpl)
				if n > 0 {
					w++
					m += uint64(n / size)
					if crc {
						gc.crc = crc32.Update(gc.crc, crc32c, gc.tmpl[:n])
					}
					gc.bytes += uint64(n)
					gc.onTime += uint64(n)
					gc.msgs += uint64(n / size)
				}
				if err != nil {
					gc.dead = true
				}
			}
			mu.Lock()
			writes += w
			msgs += m
			mu.Unlock()
		})
	}
	wg.Wait()
	return writes, msgs
}
