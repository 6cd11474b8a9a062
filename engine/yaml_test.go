package engine

import (
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is plain data with YAML tags; a service can load it from a file.
func TestConfigFromYAML(t *testing.T) {
	var c Config
	err := yaml.Unmarshal([]byte(`
runner: epoll
workers: 2
buf_size: 16384
buffers: 64
max_per_source: 8
flush: 10ms
queue_high: 48
queue_low: 16
handlers: 3
max_threads: 100
`), &c)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Runner: RunnerEpoll, Workers: 2, BufSize: 16384, Buffers: 64, MaxPerSource: 8,
		Flush: 10 * time.Millisecond, QueueHigh: 48, QueueLow: 16, Handlers: 3, MaxThreads: 100}
	if c != want {
		t.Fatalf("decoded %+v, want %+v", c, want)
	}
	if _, err := c.withDefaults(); err != nil {
		t.Fatal(err)
	}
}
