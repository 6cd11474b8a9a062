package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"unknown runner", Config{Runner: "kqueue"}, "Runner"},
		{"negative workers", Config{Workers: -1}, "Workers"},
		{"absurd workers", Config{Workers: 100000}, "Workers"},
		{"buffer not a power of two", Config{BufSize: 10000}, "BufSize"},
		{"negative buffers", Config{Buffers: -4}, "Buffers"},
		{"pool over its cap", Config{BufSize: 1 << 20, Buffers: 4096, MaxPoolBytes: 1 << 30}, "Buffers"},
		{"negative pool cap", Config{MaxPoolBytes: -1}, "MaxPoolBytes"},
		{"per-source cap above the pool", Config{Buffers: 8, MaxPerSource: 9}, "MaxPerSource"},
		{"low watermark above high", Config{QueueHigh: 10, QueueLow: 10}, "QueueLow"},
		{"negative watermark", Config{QueueHigh: -1}, "QueueHigh"},
		{"negative handlers", Config{Handlers: -1}, "Handlers"},
		{"negative thread cap", Config{MaxThreads: -1}, "MaxThreads"},
		{"batch wait as long as the flush", Config{Flush: time.Millisecond, BatchWait: time.Millisecond}, "BatchWait"},
		{"batch wait with flush on every read", Config{Flush: -1, BatchWait: time.Microsecond}, "BatchWait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("New: %v; want a *ConfigError naming %s", err, tc.field)
			}
			if !strings.HasPrefix(err.Error(), "engine: config: "+tc.field) {
				t.Fatalf("message %q should begin with the package and the field", err)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Runner != RunnerAuto || c.BufSize != DefaultBufSize || c.Buffers != DefaultBuffers ||
		c.Flush != DefaultFlush || c.MaxThreads != DefaultMaxThreads || c.Workers < 1 || c.Handlers < 1 {
		t.Fatalf("defaults: %+v", c)
	}
	if c.QueueHigh != 768 || c.QueueLow != 512 {
		t.Fatalf("watermarks %d/%d, want 768/512", c.QueueHigh, c.QueueLow)
	}
	if c.BatchWait != DefaultBatchWait {
		t.Fatalf("BatchWait %v, want %v", c.BatchWait, DefaultBatchWait)
	}
	c, err = Config{Flush: -time.Second}.withDefaults()
	if err != nil || c.Flush != 0 || c.BatchWait != 0 {
		t.Fatalf("negative Flush should mean every read, with no batched waits: %v %v %v", c.Flush, c.BatchWait, err)
	}
	// A short flush shortens the default batch wait with it.
	if c, err = (Config{Flush: 100 * time.Microsecond}).withDefaults(); err != nil || c.BatchWait != 40*time.Microsecond {
		t.Fatalf("Flush 100µs: BatchWait %v, %v; want 40µs", c.BatchWait, err)
	}
	if c, err = (Config{BatchWait: -1}).withDefaults(); err != nil || c.BatchWait != 0 {
		t.Fatalf("negative BatchWait should turn batching off: %v %v", c.BatchWait, err)
	}
}
