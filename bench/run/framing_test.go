package run

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/sink"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// crcTable is the CRC-32C table of the bench's checksums.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// TestFrameMessage encodes generated messages of awkward sizes for every
// framer and reads them back with the framer itself.
func TestFrameMessage(t *testing.T) {
	sizes := []int{16, 17, 100, 127, 128, 129, 130, 131, 1000, 16383, 16384, 16386, 16387, 16388, 70000}
	for _, spec := range []string{"newline", "length:1le", "length:2be", "length:4le", "length:8be", "octet", "mqtt"} {
		f, err := srcs.ParseFraming(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range sizes {
			msg := make([]byte, size)
			for i := range msg {
				msg[i] = byte(i * 7) // holds '\n' bytes, which a newline record must lose
			}
			err := load.FrameMessage(f, msg)
			if (spec == "length:1le" && size > 1+math.MaxUint8) || (spec == "length:2be" && size > 2+math.MaxUint16) ||
				(spec == "mqtt" && (size == 130 || size == 16387)) {
				if err == nil {
					t.Errorf("%s: a %d-byte record was encoded", spec, size)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %d bytes: %v", spec, size, err)
				continue
			}
			stream := bytes.Repeat(msg, 3)
			n, k, err := srcs.CountRecords(f, stream)
			if err != nil || n != 3 || k != len(stream) {
				t.Errorf("%s: %d bytes: read back %d records over %d of %d bytes, err %v", spec, size, n, k, len(stream), err)
			}
			if spec == "newline" && bytes.IndexByte(msg, '\n') != size-1 {
				t.Errorf("newline: %d bytes: a '\\n' before the end", size)
			}
			if err := load.CheckRecord(f, size, 0); err != nil {
				t.Errorf("%s: %d bytes: checkRecord: %v", spec, size, err)
			}
		}
	}
	for _, tc := range []struct {
		spec string
		size int
		buf  int
	}{
		{"newline:100", 1000, 0},    // above the framer's maximum
		{"newline", 70000, 1 << 16}, // above a buffer
		{"octet:10", 16, 0},
		{"mqtt", 5, 0}, // too short for a PUBLISH with a topic
		{"length:4le", 3, 0},
	} {
		f, _ := srcs.ParseFraming(tc.spec)
		if err := load.CheckRecord(f, tc.size, tc.buf); err == nil {
			t.Errorf("%s: a %d-byte record passed with %d-byte buffers", tc.spec, tc.size, tc.buf)
		}
	}
}

// TestCollectorCountsRecords feeds the collector chunks as a framed lane
// emits them: whole records, then a truncated tail; and one that breaks the
// rule, which must show as misframed.
func TestCollectorCountsRecords(t *testing.T) {
	chunk := func(id srcs.ID, data string, flags srcs.Flags) engine.Chunk {
		return engine.Chunk{Source: id, Name: fmt.Sprintf("tcp://peer%d", id), Data: []byte(data), Flags: flags}
	}
	col := bench.NewCollector(0, true, srcs.Newline{})
	col.Handle(chunk(0, "a\nbb\n", srcs.Records))
	col.Handle(chunk(0, "ccc\n\n", srcs.Records|srcs.Partial))
	col.Handle(chunk(0, "dd\nunfinished", srcs.Records|srcs.Truncated))
	col.Handle(chunk(0, "", srcs.EndOfStream))
	col.Handle(chunk(1, "x\ny", srcs.Records)) // not on a boundary
	col.OnError(&srcs.SourceError{ID: 1, Name: "tcp://peer1", Op: "read",
		Err: &srcs.RecordError{Framer: "newline", Size: 500, Max: 100, Skip: srcs.SkipToBoundary}})
	end := chunk(1, "", srcs.EndOfStream)
	end.Final = &engine.SourceStats{ID: 1, RecordsSkipped: 3}
	col.Handle(end)
	ss := col.Snapshot()
	if len(ss) != 2 {
		t.Fatalf("%d streams", len(ss))
	}
	if s := ss[0]; s.Records != 5 || s.Truncated != len64("unfinished") || s.Misframed != 0 || s.Bytes != 23 || s.Skipped != 0 {
		t.Errorf("stream 0: %d records, %d truncated, %d misframed, %d bytes, %d skipped; want 5, 10, 0, 23, 0",
			s.Records, s.Truncated, s.Misframed, s.Bytes, s.Skipped)
	}
	if s := ss[1]; s.Records != 1 || s.Misframed != 1 || s.Skipped != 3 || s.Errors.Load() != 1 {
		t.Errorf("stream 1: %d records, %d misframed, %d skipped, %d errors; want 1, 1, 3 (the final count), 1",
			s.Records, s.Misframed, s.Skipped, s.Errors.Load())
	}
	if n := col.Records.Load(); n != 6 {
		t.Errorf("total records %d, want 6", n)
	}

	raw := bench.NewCollector(0, true, nil)
	raw.Handle(chunk(0, "a\nb\n", 0))
	if s := raw.Snapshot()[0]; s.Records != 0 || raw.Records.Load() != 0 {
		t.Errorf("a raw collector counted %d records", s.Records)
	}
}

func len64(s string) uint64 { return uint64(len(s)) }

// TestGenFramed runs the generator in-process with framing, unpaced and
// paced, and checks that each connection carries whole records that the
// framer reads back, with the bytes and CRC-32C the report claims and no
// timestamps written into them.
func TestGenFramed(t *testing.T) {
	for _, tc := range []struct {
		framing string
		rate    report.Rate
	}{
		{"newline", 0},
		{"length:4le", 0},
		{"octet", 128 << 10},
		{"mqtt", 128 << 10},
	} {
		t.Run(fmt.Sprintf("%s-rate%v", tc.framing, float64(tc.rate)), func(t *testing.T) {
			f, err := srcs.ParseFraming(tc.framing)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			const sources, size = 3, 700
			type got struct {
				bytes, records int
				crc            uint32
				same           bool // every record the same as the first
			}
			var mu sync.Mutex
			recv := map[string]got{}
			var wg sync.WaitGroup
			wg.Go(func() {
				for range sources {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					wg.Go(func() {
						defer c.Close()
						b, _ := io.ReadAll(c)
						n, k, err := srcs.CountRecords(f, b)
						g := got{bytes: len(b), crc: crc32.Checksum(b, crcTable), same: err == nil && k == len(b)}
						if g.same {
							g.records = n
							for i := size; i+size <= len(b); i += size {
								g.same = g.same && bytes.Equal(b[i:i+size], b[:size])
							}
						}
						mu.Lock()
						recv[c.RemoteAddr().String()] = g
						mu.Unlock()
					})
				}
			})
			var out bytes.Buffer
			cfg := load.GenConfig{Addr: ln.Addr().String(), Sources: sources, Duration: 200 * time.Millisecond, MsgSize: size,
				Rate: tc.rate, Arrivals: load.ArrivalsPoisson, MaxDial: 2, Seed: 1, Framing: tc.framing}
			if err := load.RunGen(context.Background(), cfg, strings.NewReader(""), &out); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			var rep load.GenReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if len(rep.Streams) != sources || rep.SentBytes == 0 {
				t.Fatalf("report %+v", rep)
			}
			for _, s := range rep.Streams {
				g := recv[s.Local]
				if uint64(g.bytes) != s.Bytes || fmt.Sprintf("%08x", g.crc) != s.CRC32C {
					t.Errorf("%s: received %d bytes crc %08x, report says %d crc %s", s.Local, g.bytes, g.crc, s.Bytes, s.CRC32C)
				}
				if !g.same || g.bytes%size != 0 || g.records != g.bytes/size || uint64(g.records) != s.Messages {
					t.Errorf("%s: %d bytes, %d records (%d messages sent), all alike %v: want whole %d-byte records",
						s.Local, g.bytes, g.records, s.Messages, g.same, size)
				}
			}
			if tc.rate > 0 && rep.LagNs.Count != int64(rep.SentBytes/size) {
				t.Errorf("lag of %d messages, sent %d", rep.LagNs.Count, rep.SentBytes/size)
			}
		})
	}
}

// TestFramingFlagErrors checks --framing's validation in run and sink:
// every error names a flag.
func TestFramingFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--framing", "json"}, "--framing"},
		{[]string{"--framing", "length:3le"}, "--framing"},
		{[]string{"--framing", "newline:0"}, "--framing"},
		{[]string{"--framing", "length:1le", "--msg-size", "1KiB"}, "--framing"},
		{[]string{"--framing", "newline:100", "--msg-size", "1KiB"}, "--framing"},
		{[]string{"--framing", "newline", "--msg-size", "128KiB"}, "--msg-size"},
		{[]string{"--framing", "newline", "--pool", "4"}, "--pool"},
		{[]string{"--framing", "newline", "--target", "p99<=1"}, "--target"},
	} {
		err := parseRun(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("run %v: error %v does not name %s", tc.args, err, tc.flag)
		}
	}
	for _, args := range [][]string{
		{"--framing", "newline", "--msg-size", "64KiB", "--buf", "128KiB"},
		{"--framing", "length:2be", "--msg-size", "65537", "--buf", "128KiB"},
		{"--framing", "mqtt:1MiB", "--target", "cpu_s_per_gib<=1.2"},
		{"--framing", "none"},
	} {
		if err := parseRun(args...); err != nil {
			t.Errorf("run %v: %v", args, err)
		}
	}
	if err := parseRun("--framing", "length:1le", "--msg-size", "256"); err != nil {
		t.Errorf("the largest 1-byte-prefixed record was refused: %v", err)
	}

	sink := func(args ...string) error {
		c := sink.DefaultSinkConfig()
		fs := flag.NewFlagSet("sink", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			return err
		}
		return c.Validate()
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--framing", "lines"}, "--framing"},
		{[]string{"--framing", "mqtt:1GiB"}, "--framing"},
		{[]string{"--framing", "octet", "--pool", "7"}, "--pool"},
	} {
		if err := sink(tc.args...); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("sink %v: error %v does not name %s", tc.args, err, tc.flag)
		}
	}
	if err := sink("--framing", "octet:4KiB", "--pool", "8"); err != nil {
		t.Errorf("sink: good framing refused: %v", err)
	}
}

// TestCollectorFramedAllocs: counting records adds no allocation to the
// collector's per-chunk path.
func TestCollectorFramedAllocs(t *testing.T) {
	col := bench.NewCollector(0, true, srcs.Newline{})
	data := bytes.Repeat(append(bytes.Repeat([]byte{'x'}, 1023), '\n'), 16)
	col.Handle(engine.Chunk{Source: 0, Name: "tcp://peer", Data: data, Flags: srcs.Records})
	if n := testing.AllocsPerRun(100, func() {
		col.Handle(engine.Chunk{Source: 0, Name: "tcp://peer", Data: data, Flags: srcs.Records})
	}); n != 0 {
		t.Errorf("%v allocations per framed chunk", n)
	}
	if got := col.Snapshot()[0].Records; got != 102*16 { // AllocsPerRun warms up with one more call
		t.Errorf("%d records, want %d", got, 102*16)
	}
}

// TestCollectorNewlineFastPath: the collector's one-pass checksum and
// count of newline records agrees with crc32 and srcs.CountRecords on
// chunks of whole lines, with or without an unfinished tail, short or
// longer than a block.
func TestCollectorNewlineFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 300 {
		var p []byte
		for range rng.IntN(20) {
			n := rng.IntN(50)
			if rng.IntN(10) == 0 {
				n = rng.IntN(3 * bench.LineBlock)
			}
			p = append(p, bytes.Repeat([]byte{'z'}, n)...)
			p = append(p, '\n')
		}
		truncated := rng.IntN(2) == 0
		if truncated {
			p = append(p, bytes.Repeat([]byte{'t'}, rng.IntN(30))...)
		}
		wantRecs, wantN, err := srcs.CountRecords(srcs.Newline{}, p)
		if err != nil {
			t.Fatal(err)
		}
		flags := srcs.Records
		if truncated {
			flags |= srcs.Truncated
		}
		col := bench.NewCollector(0, true, srcs.Newline{Max: 4 * bench.LineBlock})
		col.Handle(engine.Chunk{Source: 0, Name: "tcp://peer", Data: p, Flags: flags})
		if len(p) == 0 {
			continue
		}
		s := col.Snapshot()[0]
		if s.Records != uint64(wantRecs) || s.Truncated != uint64(len(p)-wantN) || s.Misframed != 0 || s.CRC != crc32.Checksum(p, crcTable) {
			t.Fatalf("case %d, %d bytes: %d records, %d truncated, %d misframed, crc %08x; want %d, %d, 0, %08x",
				i, len(p), s.Records, s.Truncated, s.Misframed, s.CRC, wantRecs, len(p)-wantN, crc32.Checksum(p, crcTable))
		}
	}
}
