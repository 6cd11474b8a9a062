package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGenReportsWhatItSent runs the generator in-process against a plain
// listener and checks that its report matches what arrived, for every
// pacing model, and that every message carries a plausible timestamp.
func TestGenReportsWhatItSent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rate     Rate
		arrivals string
		skew     float64
	}{
		{"unlimited", 0, ArrivalsPoisson, 0},
		{"poisson", 256 << 10, ArrivalsPoisson, 0},
		{"uniform-skewed", 256 << 10, ArrivalsUniform, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			const sources, size = 4, 512
			type got struct {
				bytes int
				crc   uint32
				stamp int
			}
			var mu sync.Mutex
			recv := map[string]got{}
			var wg sync.WaitGroup
			start := time.Now().UnixNano()
			wg.Go(func() {
				for range sources {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					wg.Go(func() {
						defer c.Close()
						b, _ := io.ReadAll(c)
						g := got{bytes: len(b), crc: crc32.Checksum(b, castagnoli)}
						tr := recordTracker{size: size}
						var rec, e2e fakeRec
						g.stamp = tr.feed(b, time.Now().UnixNano(), &rec, &e2e)
						for _, v := range rec.vals {
							if v <= 0 || v > time.Now().UnixNano()-start {
								g.stamp = -1
							}
						}
						mu.Lock()
						recv[c.RemoteAddr().String()] = g
						mu.Unlock()
					})
				}
			})
			var out bytes.Buffer
			cfg := GenConfig{Addr: ln.Addr().String(), Sources: sources, Duration: 300 * time.Millisecond, MsgSize: size,
				Rate: tc.rate, Arrivals: tc.arrivals, Skew: tc.skew, MaxDial: 2, Seed: 1}
			if err := RunGen(context.Background(), cfg, strings.NewReader(""), &out); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			var rep GenReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if rep.Event != "done" || len(rep.Streams) != sources || rep.SentBytes == 0 {
				t.Fatalf("report %+v", rep)
			}
			for _, s := range rep.Streams {
				g := recv[s.Local]
				if uint64(g.bytes) != s.Bytes || fmt.Sprintf("%08x", g.crc) != s.CRC32C {
					t.Errorf("%s: received %d bytes crc %08x, report says %d crc %s", s.Local, g.bytes, g.crc, s.Bytes, s.CRC32C)
				}
				if g.stamp <= 0 {
					t.Errorf("%s: %d timestamps, or an implausible one", s.Local, g.stamp)
				}
			}
			if tc.rate > 0 {
				offered := float64(tc.rate) * sources * 0.3
				if got := float64(rep.SentBytes); got < offered*0.5 || got > offered*1.5 {
					t.Errorf("sent %v bytes, offered about %v", got, offered)
				}
			}
		})
	}
}
