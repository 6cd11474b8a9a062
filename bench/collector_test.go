package bench

import (
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// TestCollectorQuietSource: a quiet source's lines are timed, and its
// bytes stay out of the load's totals and streams, which are counted and
// checksummed as before.
func TestCollectorQuietSource(t *testing.T) {
	c := NewCollector(0, true, nil)
	now := time.Now().UnixNano()
	load := []byte("sluice-quiet is not at the start of this stream\n")
	for _, ch := range []engine.Chunk{
		{Source: 0, Name: "tcp://10.0.0.2:1", Data: load},
		{Source: 1, Name: "tcp://10.0.0.2:2", Data: []byte(fmt.Sprintf("sluice-quiet\n%d\n%d", now, now))},
		{Source: 1, Name: "tcp://10.0.0.2:2", Data: []byte("\n")},
		{Source: 0, Name: "tcp://10.0.0.2:1", Flags: srcs.EndOfStream},
		{Source: 1, Name: "tcp://10.0.0.2:2", Flags: srcs.EndOfStream},
	} {
		c.Handle(ch)
	}
	streams := c.Snapshot()
	if len(streams) != 1 || streams[0].Bytes != uint64(len(load)) || c.Total.Load() != uint64(len(load)) ||
		streams[0].CRC != crc32.Checksum(load, castagnoli) {
		t.Errorf("%d streams, %d bytes in all; want the load's one stream of %d bytes", len(streams), c.Total.Load(), len(load))
	}
	if c.Ended.Load() != 1 {
		t.Errorf("%d sources ended, want the load's 1", c.Ended.Load())
	}
	q := c.Quiet()
	if q == nil || q.Connections != 1 || q.Lines != 2 || q.BadLines != 0 || len(q.LatencyNs) != 2 {
		t.Fatalf("quiet %+v; want 1 connection, 2 lines", q)
	}
	for _, ns := range q.LatencyNs {
		if ns < 0 || ns > int64(10*time.Second) {
			t.Errorf("latency %v", time.Duration(ns))
		}
	}
	if NewCollector(0, true, nil).Quiet() != nil {
		t.Error("a collector with no quiet source reports one")
	}
}
