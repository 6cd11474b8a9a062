package load

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench/report"
)

// TestGenReportsWhatItSent runs the generator in-process against a plain
// listener and checks that its report matches what arrived, for every
// pacing model, and that every message carries a plausible timestamp.
func TestGenReportsWhatItSent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rate     report.Rate
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
						g := got{bytes: len(b), crc: crc32.Checksum(b, crc32c)}
						tr := RecordTracker{Size: size}
						var rec, e2e fakeRec
						g.stamp = tr.Feed(b, time.Now().UnixNano(), &rec, &e2e)
						for i, v := range rec.vals {
							// Sent no earlier than scheduled, and both since the start.
							if v <= 0 || v > time.Now().UnixNano()-start || e2e.vals[i] < v {
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

// TestGenPacing offers a tiny paced load and checks that the generator
// holds it: the messages sent match the offered rate, the report says it
// held the load, and its lag stays small.
func TestGenPacing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const sources, size = 8, 1024
	const rate = 64 << 10 // 64 messages a second per source
	const dur = 500 * time.Millisecond
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lags []int64 // sent minus scheduled, from the headers
	wg.Go(func() {
		for range sources {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				mu.Lock()
				defer mu.Unlock()
				for m := 0; m+size <= len(b); m += size {
					sched := int64(binary.LittleEndian.Uint64(b[m+SchedOff:]))
					sent := int64(binary.LittleEndian.Uint64(b[m+SentOff:]))
					lags = append(lags, sent-sched)
				}
			})
		}
	})
	var out bytes.Buffer
	cfg := GenConfig{Addr: ln.Addr().String(), Sources: sources, Duration: dur, MsgSize: size,
		Rate: rate, Arrivals: ArrivalsUniform, MaxDial: 4, Seed: 3}
	if err := RunGen(context.Background(), cfg, strings.NewReader(""), &out); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var rep GenReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// Uniform arrivals after a random phase: each source sends 32 messages
	// in 0.5 s, give or take the one at the edge.
	want := float64(sources) * rate / size * dur.Seconds()
	if got := float64(len(lags)); got < want-sources || got > want+sources {
		t.Errorf("received %v messages, offered %v", got, want)
	}
	if h := rep.HeldFraction(); h < 0.9 || h > 1.1 {
		t.Errorf("held %.3f of the offered load", h)
	}
	// Loose bounds: the race detector and a shared machine slow things.
	if rep.LagNs.Count != int64(len(lags)) || rep.LagNs.P50 > int64(20*time.Millisecond) {
		t.Errorf("lag summary %+v for %d messages", rep.LagNs, len(lags))
	}
	for i, l := range lags {
		if l < 0 || l > int64(200*time.Millisecond) {
			t.Fatalf("message %d: sent %v after its schedule", i, time.Duration(l))
		}
	}
}

// TestGenPacingWrites checks how each pacing turns arrivals into writes:
// spread writes every message alone, batch may gather several.
func TestGenPacingWrites(t *testing.T) {
	for _, pacing := range []string{PacingSpread, PacingBatch} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		const sources, size = 16, 256
		var wg sync.WaitGroup
		wg.Go(func() {
			for range sources {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Go(func() {
					defer c.Close()
					io.Copy(io.Discard, c)
				})
			}
		})
		var out bytes.Buffer
		// 1,000 messages a second per source, Poisson: two arrivals of
		// one source often fall within one wake-up of the batch pacing.
		cfg := GenConfig{Addr: ln.Addr().String(), Sources: sources, Duration: 300 * time.Millisecond, MsgSize: size,
			Rate: 1000 * size, Arrivals: ArrivalsPoisson, MaxDial: 4, Seed: 5, Pacing: pacing}
		if err := RunGen(context.Background(), cfg, strings.NewReader(""), &out); err != nil {
			t.Fatal(err)
		}
		ln.Close()
		wg.Wait()
		var rep GenReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		var msgs uint64
		for _, s := range rep.Streams {
			msgs += s.Messages
		}
		switch {
		case msgs == 0:
			t.Errorf("%s: no messages", pacing)
		case pacing == PacingSpread && rep.Writes != msgs:
			t.Errorf("spread pacing: %d writes for %d messages, want one each", rep.Writes, msgs)
		case rep.Writes > msgs:
			t.Errorf("%s: %d writes for %d messages", pacing, rep.Writes, msgs)
		}
		t.Logf("%s: %d messages in %d writes", pacing, msgs, rep.Writes)
	}
}
