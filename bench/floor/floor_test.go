package floor

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
)

func TestFloor(t *testing.T) {
	c := DefaultFloorConfig()
	c.Sources, c.Duration, c.Pin = 2, 50*time.Millisecond, false
	c.Engine.Pool, c.Engine.Buf = 16, 4096
	var out strings.Builder
	rep, err := Floor(context.Background(), c, harness.IO{Out: &out, Err: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Chunks == 0 || rep.Bytes != rep.Chunks*4096 || rep.CPUNsPerChunk <= 0 || rep.Runner != "goroutine" {
		t.Errorf("floor report %+v", rep)
	}
	if !strings.Contains(out.String(), "ns of CPU per chunk") {
		t.Errorf("output %q", out.String())
	}
	if err := (FloorConfig{Sources: 0, Duration: time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "--sources") {
		t.Errorf("zero sources: %v", err)
	}
}
