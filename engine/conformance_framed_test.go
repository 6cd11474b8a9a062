package engine_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	"github.com/sluice-io/sluice/srcs"
)

// Framed conformance, the engine's framing suite (TestFramed*, next to the
// conformance table in conformance_test.go): whichever runner reads a
// framed source, every chunk starts and ends on a record boundary
// (Records), records split across reads at any byte arrive whole and in
// order, and an oversized record is skipped or ends the source as its
// framer says, with nothing else lost.

// framedCase is one framer with a way to encode a record of it.
type framedCase struct {
	name   string
	framer srcs.Framer
	encode func(dst, payload []byte) []byte
	// payload makes a valid payload of n bytes.
	payload func(r *rand.Rand, n int) []byte
}

func randomBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func framedCases() []framedCase {
	text := func(r *rand.Rand, n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = 'a' + byte(r.IntN(26))
		}
		return p
	}
	return []framedCase{
		{"newline", srcs.Newline{}, func(dst, p []byte) []byte { return append(append(dst, p...), '\n') }, text},
		{"length4le", srcs.LengthPrefix{Size: 4, Order: binary.LittleEndian}, func(dst, p []byte) []byte {
			return append(binary.LittleEndian.AppendUint32(dst, uint32(len(p))), p...)
		}, randomBytes},
		{"length2be", srcs.LengthPrefix{Size: 2, Order: binary.BigEndian}, func(dst, p []byte) []byte {
			return append(binary.BigEndian.AppendUint16(dst, uint16(len(p))), p...)
		}, randomBytes},
		{"octet", srcs.OctetCounting{}, func(dst, p []byte) []byte {
			return append(append(strconv.AppendInt(dst, int64(len(p)), 10), ' '), p...)
		}, text},
		{"mqtt", srcs.MQTTPackets{}, func(dst, p []byte) []byte {
			// A QoS 0 PUBLISH: header, remaining length, topic "t", payload.
			rem := 3 + len(p)
			dst = append(dst, 0x30)
			for {
				b := byte(rem & 0x7f)
				rem >>= 7
				if rem > 0 {
					b |= 0x80
				}
				dst = append(dst, b)
				if rem == 0 {
					break
				}
			}
			return append(append(dst, 0, 1, 't'), p...)
		}, randomBytes},
	}
}

// recordStream is what a framed collector saw of one source.
type recordStream struct {
	id        srcs.ID
	key       string // "" until its first chunk
	records   int
	bytes     int64
	crc       uint32
	truncated int // bytes after the last whole record of a Truncated chunk
	eos       bool
	skipped   uint64 // records skipped, from the end-of-stream chunk's Final
	errs      []error
}

// recordCollector consumes an engine and checks that every data chunk of
// a framed source holds whole records.
type recordCollector struct {
	t      *testing.T
	framer srcs.Framer
	mu     sync.Mutex
	byID   map[srcs.ID]*recordStream
	seen   map[string]*recordStream // by key (see streamid_test.go)
	bad    []string
	change chan struct{}
}

func newRecordCollector(t *testing.T, f srcs.Framer) *recordCollector {
	return &recordCollector{t: t, framer: f, byID: map[srcs.ID]*recordStream{}, seen: map[string]*recordStream{}, change: make(chan struct{}, 1)}
}

func (c *recordCollector) source(id srcs.ID) *recordStream {
	s := c.byID[id]
	if s == nil {
		s = &recordStream{id: id}
		c.byID[id] = s
	}
	return s
}

// file files s under key: the tag in its first record, else its name
// (tagged false).
func (c *recordCollector) file(s *recordStream, key string, tagged bool) {
	if o := c.seen[key]; o != nil && tagged {
		c.bad = append(c.bad, fmt.Sprintf("sources %d and %d are both %s", o.id, s.id, key))
	}
	s.key = key
	c.seen[key] = s
}

func (c *recordCollector) onError(err error) {
	var se *srcs.SourceError
	c.mu.Lock()
	if errors.As(err, &se) {
		s := c.source(se.ID)
		s.errs = append(s.errs, err)
	} else {
		c.bad = append(c.bad, fmt.Sprintf("error without a source: %v", err))
	}
	c.mu.Unlock()
	c.signal()
}

func (c *recordCollector) signal() {
	select {
	case c.change <- struct{}{}:
	default:
	}
}

func (c *recordCollector) consume(ch engine.Chunk) {
	defer ch.Release()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.signal()
	s := c.source(ch.Source)
	data := ch.Data
	if s.key == "" {
		key, n := recordTag(c.framer, data)
		if key == "" {
			c.file(s, ch.Name, false)
		} else {
			c.file(s, key, true)
		}
		data = data[n:]
	}
	if ch.Flags&srcs.EndOfStream != 0 {
		s.eos = true
		if ch.Final == nil {
			c.bad = append(c.bad, fmt.Sprintf("%s: end of stream without the source's final counters", s.key))
		} else {
			s.skipped = ch.Final.RecordsSkipped
		}
		return
	}
	if ch.Flags&srcs.Records == 0 {
		c.bad = append(c.bad, fmt.Sprintf("%s: chunk %d of %d bytes without the Records flag (%v)", s.key, ch.Seq, len(ch.Data), ch.Flags))
	}
	recs, n, err := srcs.CountRecords(c.framer, data)
	switch {
	case err != nil:
		c.bad = append(c.bad, fmt.Sprintf("%s: chunk %d: %v", s.key, ch.Seq, err))
	case n < len(data) && ch.Flags&srcs.Truncated == 0:
		c.bad = append(c.bad, fmt.Sprintf("%s: chunk %d ends inside a record: %d of %d bytes whole (%v)", s.key, ch.Seq, n, len(data), ch.Flags))
	case n < len(data):
		s.truncated += len(data) - n
	}
	s.records += recs
	s.bytes += int64(len(data))
	s.crc = crc32.Update(s.crc, srcstest.Castagnoli, data)
}

func (c *recordCollector) run(e *engine.Engine) {
	for {
		ch, err := e.Next(context.Background())
		if err != nil {
			return
		}
		c.consume(ch)
	}
}

func (c *recordCollector) waitFor(what string, cond func(map[string]*recordStream) bool) {
	c.t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond(c.seen)
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.change:
		case <-deadline.C:
			c.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// get returns a copy of what the collector saw of the stream filed under
// key: zero if none yet.
func (c *recordCollector) get(key string) recordStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s recordStream
	if p := c.seen[key]; p != nil {
		s = *p
	}
	s.errs = append([]error(nil), s.errs...)
	return s
}

// framedEngine starts an engine in pull mode with a listener framed by f,
// and returns the listener's address. cfg's zero fields take small-pool
// defaults, so that records cross buffers often.
func framedEngine(t *testing.T, runner string, f srcs.Framer, cfg engine.Config) (*engine.Engine, *recordCollector, string) {
	t.Helper()
	t.Setenv(engine.EnvRunner, "")
	cfg.Runner = runner
	if cfg.BufSize == 0 {
		cfg.BufSize = 4 << 10
	}
	if cfg.Buffers == 0 {
		cfg.Buffers = 64
	}
	col := newRecordCollector(t, f)
	e, addr := enginetest.Listen(t, cfg, srcs.ListenerConfig{Framer: f}, []engine.Option{engine.WithErrorHandler(col.onError)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		col.run(e)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
		col.mu.Lock()
		for _, b := range col.bad {
			t.Error(b)
		}
		col.mu.Unlock()
	})
	return e, col, addr
}

// TestFramedRecordsSplitEverywhere sends a stream of records whose every
// byte boundary is, in one pass or another, the end of a write followed
// by a pause, so that runners read records in two parts at every offset;
// records must still arrive whole, in order, and byte-exact.
func TestFramedRecordsSplitEverywhere(t *testing.T) {
	for _, fc := range framedCases() {
		t.Run(fc.name, func(t *testing.T) {
			forEachRunner(t, func(t *testing.T, runner string) {
				_, col, addr := framedEngine(t, runner, fc.framer, engine.Config{Flush: time.Millisecond})
				r := rand.New(rand.NewPCG(1, uint64(len(fc.name))))
				var rec []byte
				var nrec int
				for _, n := range []int{1, 5, 40, 3, 2} { // octet counting has no empty records
					rec = fc.encode(rec, fc.payload(r, n))
					nrec++
				}
				c, name := dialTagged(t, addr, fc.encode)
				var want []byte
				for split := 1; split < len(rec); split++ {
					c.Write(rec[:split])
					time.Sleep(200 * time.Microsecond)
					c.Write(rec[split:])
					want = append(want, rec...)
				}
				c.Close()
				col.waitFor("end of stream", func(m map[string]*recordStream) bool { return m[name] != nil && m[name].eos })
				got := col.get(name)
				if got.bytes != int64(len(want)) || got.crc != crc32.Checksum(want, srcstest.Castagnoli) {
					t.Errorf("got %d bytes crc %08x, want %d crc %08x", got.bytes, got.crc, len(want), crc32.Checksum(want, srcstest.Castagnoli))
				}
				if wantRecs := nrec * (len(rec) - 1); got.records != wantRecs {
					t.Errorf("got %d records, want %d", got.records, wantRecs)
				}
				if got.truncated != 0 {
					t.Errorf("%d truncated bytes in a stream of whole records", got.truncated)
				}
			})
		})
	}
}

// TestFramedConcurrentRandom sends random records in random pieces from
// several connections at once through a small pool, with a per-source cap
// of two buffers: the carry into a second buffer must never deadlock.
func TestFramedConcurrentRandom(t *testing.T) {
	for _, fc := range framedCases() {
		t.Run(fc.name, func(t *testing.T) {
			forEachRunner(t, func(t *testing.T, runner string) {
				_, col, addr := framedEngine(t, runner, fc.framer, engine.Config{Buffers: 16, MaxPerSource: 2, Flush: 2 * time.Millisecond})
				const conns = 6
				type result struct {
					name  string
					bytes int
					crc   uint32
					recs  int
				}
				res := make(chan result, conns)
				for i := range conns {
					c, name := dialTagged(t, addr, fc.encode)
					go func() {
						r := rand.New(rand.NewPCG(uint64(i), 7))
						var all []byte
						recs := 0
						for len(all) < 64<<10 {
							// Up to nearly a buffer: 4 KiB less the largest header.
							all = fc.encode(all, fc.payload(r, r.IntN(4<<10-16)))
							recs++
						}
						for p := all; len(p) > 0; {
							k := min(len(p), 1+r.IntN(3000))
							c.Write(p[:k])
							p = p[k:]
							if r.IntN(4) == 0 {
								time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
							}
						}
						c.Close()
						res <- result{name, len(all), crc32.Checksum(all, srcstest.Castagnoli), recs}
					}()
				}
				for range conns {
					want := <-res
					col.waitFor("end of stream", func(m map[string]*recordStream) bool { return m[want.name] != nil && m[want.name].eos })
					got := col.get(want.name)
					if got.bytes != int64(want.bytes) || got.crc != want.crc || got.records != want.recs {
						t.Errorf("%s: got %d bytes crc %08x %d records, want %d bytes crc %08x %d records",
							want.name, got.bytes, got.crc, got.records, want.bytes, want.crc, want.recs)
					}
				}
			})
		})
	}
}

// TestFramedOversized: a newline or octet-counted record above the
// framer's maximum is skipped, counted and reported, and the records
// around it arrive; a length-prefixed or MQTT one ends the source with a
// *srcs.RecordError after the records before it.
func TestFramedOversized(t *testing.T) {
	cases := []struct {
		fc   framedCase
		max  srcs.Framer
		skip bool
	}{
		{framedCases()[0], srcs.Newline{Max: 100}, true},
		{framedCases()[3], srcs.OctetCounting{Max: 100}, true},
		{framedCases()[1], srcs.LengthPrefix{Size: 4, Order: binary.LittleEndian, Max: 100}, false},
		{framedCases()[4], srcs.MQTTPackets{Max: 100}, false},
	}
	for _, tc := range cases {
		t.Run(tc.fc.name, func(t *testing.T) {
			forEachRunner(t, func(t *testing.T, runner string) {
				e, col, addr := framedEngine(t, runner, tc.max, engine.Config{Flush: time.Millisecond})
				r := rand.New(rand.NewPCG(3, 4))
				small1 := tc.fc.encode(nil, tc.fc.payload(r, 50))
				big := tc.fc.encode(nil, tc.fc.payload(r, 1000)) // within a buffer, above the maximum
				huge := tc.fc.encode(nil, tc.fc.payload(r, 9000))
				small2 := tc.fc.encode(nil, tc.fc.payload(r, 60))
				c, name := dialTagged(t, addr, tc.fc.encode)
				for _, p := range [][]byte{small1, big, small1, huge, small2} {
					c.Write(p)
					time.Sleep(time.Millisecond)
				}
				var want []byte
				if tc.skip {
					want = slicesConcat(small1, small1, small2)
					col.waitFor("the last record", func(m map[string]*recordStream) bool { return m[name] != nil && m[name].bytes == int64(len(want)) })
					var skipped uint64
					id := col.get(name).id
					for _, s := range e.Stats().Sources {
						if s.ID == id {
							skipped = s.RecordsSkipped
						}
					}
					if skipped != 2 {
						t.Errorf("RecordsSkipped %d, want 2", skipped)
					}
					if n := e.Totals().RecordsSkipped; n != 2 {
						t.Errorf("Totals().RecordsSkipped %d, want 2", n)
					}
				} else {
					want = small1
				}
				c.Close()
				col.waitFor("end of stream", func(m map[string]*recordStream) bool { return m[name] != nil && m[name].eos })
				got := col.get(name)
				if got.bytes != int64(len(want)) || got.crc != crc32.Checksum(want, srcstest.Castagnoli) {
					t.Errorf("got %d bytes crc %08x, want %d crc %08x", got.bytes, got.crc, len(want), crc32.Checksum(want, srcstest.Castagnoli))
				}
				var re *srcs.RecordError
				if len(got.errs) == 0 || !errors.As(got.errs[0], &re) || !errors.Is(got.errs[0], srcs.ErrRecordTooLong) {
					t.Fatalf("errors %v, want a *srcs.RecordError first", got.errs)
				}
				if tc.skip && len(got.errs) != 1 {
					t.Errorf("errors %v: want the first skip reported, once", got.errs)
				}
				// A record that ends the source counts as skipped too.
				wantSkipped := uint64(1)
				if tc.skip {
					wantSkipped = 2
				}
				if got.skipped != wantSkipped || e.Totals().RecordsSkipped != wantSkipped {
					t.Errorf("records skipped: %d at the end of stream, %d in Totals; want %d", got.skipped, e.Totals().RecordsSkipped, wantSkipped)
				}
			})
		})
	}
}

func slicesConcat(ps ...[]byte) []byte { return bytes.Join(ps, nil) }

// TestFramedTruncatedEnd: a stream that ends inside a record delivers the
// bytes of that record too, in a last chunk flagged Truncated.
func TestFramedTruncatedEnd(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		fc := framedCases()[0]
		_, col, addr := framedEngine(t, runner, fc.framer, engine.Config{Flush: time.Millisecond})
		c, name := dialTagged(t, addr, fc.encode)
		msg := []byte("one\ntwo\nthree without an end")
		c.Write(msg)
		time.Sleep(5 * time.Millisecond)
		c.Close()
		col.waitFor("end of stream", func(m map[string]*recordStream) bool { return m[name] != nil && m[name].eos })
		got := col.get(name)
		if got.bytes != int64(len(msg)) || got.records != 2 || got.truncated != len("three without an end") {
			t.Errorf("got %d bytes, %d records, %d truncated; want %d, 2, %d", got.bytes, got.records, got.truncated, len(msg), len("three without an end"))
		}
	})
}

// TestFramedFile reads a file of lines, framed, on every runner.
func TestFramedFile(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var data []byte
	lines := 0
	for len(data) < 300<<10 {
		n := r.IntN(2000)
		for range n {
			data = append(data, 'a'+byte(r.IntN(26)))
		}
		data = append(data, '\n')
		lines++
	}
	path := filepath.Join(t.TempDir(), "lines")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	forEachRunner(t, func(t *testing.T, runner string) {
		e, col, _ := framedEngine(t, runner, srcs.Newline{}, engine.Config{})
		src, err := srcs.NewFile(srcs.FileConfig{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.AddSource(src, engine.WithFraming(srcs.Newline{})); err != nil {
			t.Fatal(err)
		}
		col.waitFor("end of file", func(m map[string]*recordStream) bool { return m[src.Name()] != nil && m[src.Name()].eos })
		got := col.get(src.Name())
		if got.bytes != int64(len(data)) || got.crc != crc32.Checksum(data, srcstest.Castagnoli) || got.records != lines {
			t.Errorf("got %d bytes crc %08x %d records, want %d crc %08x %d", got.bytes, got.crc, got.records, len(data), crc32.Checksum(data, srcstest.Castagnoli), lines)
		}
	})
}

// TestFramedNeedsTwoBuffers: a framed source cannot run with a per-source
// cap of one buffer, and says so.
func TestFramedNeedsTwoBuffers(t *testing.T) {
	e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 4, BufSize: 4096, MaxPerSource: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	src, err := srcs.NewFile(srcs.FileConfig{Path: os.DevNull})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.AddSource(src, engine.WithFraming(srcs.Newline{}))
	var ce *engine.ConfigError
	if !errors.As(err, &ce) || ce.Field != "MaxPerSource" {
		t.Fatalf("AddSource: %v, want a ConfigError on MaxPerSource", err)
	}
}

// TestFramedPausesInsideRecords sends records of sizes around
// contract.ParkMax and around the buffer size, each cut in pieces with a pause
// several flush timeouts long at every cut: a lane holds part of a record
// past its flush deadline, parked outside the pool when the part is short
// enough and kept in its buffer when it is not, and must go on reading
// either way. Every record arrives whole and byte-exact, and the end of
// the stream is seen.
func TestFramedPausesInsideRecords(t *testing.T) {
	const (
		bufSize = 16 << 10
		flush   = 2 * time.Millisecond
		pause   = 4 * flush
	)
	sizes := []int{contract.ParkMax - 20, contract.ParkMax - 1, contract.ParkMax, contract.ParkMax + 1, contract.ParkMax + 50, bufSize / 2, bufSize - 16}
	for _, fc := range framedCases() {
		t.Run(fc.name, func(t *testing.T) {
			forEachRunner(t, func(t *testing.T, runner string) {
				_, col, addr := framedEngine(t, runner, fc.framer, engine.Config{BufSize: bufSize, Buffers: 32, Flush: flush})
				r := rand.New(rand.NewPCG(11, uint64(len(fc.name))))
				c, name := dialTagged(t, addr, fc.encode)
				var want []byte
				for _, n := range sizes {
					rec := fc.encode(nil, fc.payload(r, n))
					// Cut after the first byte, on both sides of ParkMax,
					// and before the last byte.
					cuts := []int{0}
					for _, k := range []int{1, contract.ParkMax, contract.ParkMax + 1, len(rec) - 1} {
						if k > cuts[len(cuts)-1] && k < len(rec) {
							cuts = append(cuts, k)
						}
					}
					cuts = append(cuts, len(rec))
					for i := 1; i < len(cuts); i++ {
						if _, err := c.Write(rec[cuts[i-1]:cuts[i]]); err != nil {
							t.Fatal(err)
						}
						time.Sleep(pause) // the pause under test, not synchronisation
					}
					want = append(want, rec...)
				}
				c.Close()
				col.waitFor("end of stream", func(m map[string]*recordStream) bool { return m[name] != nil && m[name].eos })
				got := col.get(name)
				if got.bytes != int64(len(want)) || got.crc != crc32.Checksum(want, srcstest.Castagnoli) || got.records != len(sizes) || got.truncated != 0 {
					t.Errorf("got %d bytes crc %08x, %d records, %d truncated; want %d bytes crc %08x, %d records, none truncated",
						got.bytes, got.crc, got.records, got.truncated, len(want), crc32.Checksum(want, srcstest.Castagnoli), len(sizes))
				}
			})
		})
	}
}

// TestFramedIdleLaneSpendsNoCPU: a framed lane that holds part of a record
// too long to park has nothing a flush could move, so while the sender
// pauses it waits for the rest without a busy loop, on every runner.
func TestFramedIdleLaneSpendsNoCPU(t *testing.T) {
	const (
		flush = time.Millisecond
		idle  = 400 * time.Millisecond
	)
	forEachRunner(t, func(t *testing.T, runner string) {
		fc := framedCases()[0]
		e, col, addr := framedEngine(t, runner, fc.framer, engine.Config{BufSize: 16 << 10, Flush: flush})
		c, name := dialTagged(t, addr, fc.encode)
		part := bytes.Repeat([]byte("p"), contract.ParkMax+1)
		if _, err := c.Write(part); err != nil {
			t.Fatal(err)
		}
		// The tag's record arrives once the part has been read with it or
		// after it; then the lane holds the part past its flush deadline.
		col.waitFor("the tag", func(m map[string]*recordStream) bool { return m[name] != nil })
		time.Sleep(10 * flush) // past the flush deadline, not synchronisation
		cpu0, rs0 := processCPU(t), runnerActivity(e)
		time.Sleep(idle)
		cpu, acts := processCPU(t)-cpu0, runnerActivity(e)-rs0
		// A spinning lane burns a whole CPU for the interval; an idle one
		// next to nothing. A quarter leaves room for the race detector and
		// the runtime's own work.
		if cpu > idle/4 || acts > 20 {
			t.Errorf("%s: a framed lane waiting for the rest of a record used %v of CPU and %d reads or waits in %v", runner, cpu, acts, idle)
		}
		rest := []byte("the rest\n")
		if _, err := c.Write(rest); err != nil {
			t.Fatal(err)
		}
		c.Close()
		col.waitFor("end of stream", func(m map[string]*recordStream) bool { return m[name] != nil && m[name].eos })
		want := append(part, rest...)
		if got := col.get(name); got.bytes != int64(len(want)) || got.crc != crc32.Checksum(want, srcstest.Castagnoli) || got.records != 1 || got.truncated != 0 {
			t.Errorf("%s: got %d bytes, %d records, %d truncated; want %d bytes in one record", runner, got.bytes, got.records, got.truncated, len(want))
		}
	})
}

// processCPU returns the CPU time (user and system) the test process has
// used so far.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runnerActivity returns the reads and readability waits every runner of
// e has made.
func runnerActivity(e *engine.Engine) uint64 {
	var n uint64
	for _, r := range e.Stats().Runners {
		n += r.Reads + r.Waits
	}
	return n
}
