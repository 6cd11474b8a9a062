package floor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// FloorConfig configures the `floor` command: the engine's own cost per
// chunk, with no kernel in the path. In-memory sources fill every buffer
// at once without copying, so what is measured is emit, delivery to the
// handler, release and re-acquiring a buffer. Sources without a kernel
// descriptor are driven by the goroutine runner whatever the engine's
// main runner, so the figure is the engine's floor, not a runner's.
type FloorConfig struct {
	Sources  int
	Duration time.Duration
	Engine   harness.EngineFlags
	Pin      bool // confine the engine to the CPUs run gives it
	JSON     string
}

// DefaultFloorConfig returns the documented defaults: 4 sources for 2 s,
// pinned like run's engine.
func DefaultFloorConfig() FloorConfig {
	return FloorConfig{Sources: 4, Duration: 2 * time.Second, Pin: true}
}

// RegisterFlags defines c's flags on fs.
func (c *FloorConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Sources, "sources", c.Sources, "in-memory sources")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to measure")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.BoolVar(&c.Pin, "pin", c.Pin, "pin the engine to the CPUs run gives it (the first half)")
	c.Engine.Register(fs)
}

// Validate checks c, naming the flag at fault.
func (c FloorConfig) Validate() error {
	switch {
	case c.Sources < 1:
		return fmt.Errorf("--sources: %d: must be at least 1", c.Sources)
	case c.Duration <= 0:
		return fmt.Errorf("--duration: %v: must be positive", c.Duration)
	}
	return c.Engine.Validate()
}

// FloorReport is the JSON report of `floor`.
type FloorReport struct {
	Command       string        `json:"command"` // "floor"
	Runner        string        `json:"runner"`  // the runner that drove the sources
	Sources       int           `json:"sources"`
	Chunks        uint64        `json:"chunks"`
	Bytes         uint64        `json:"bytes"`
	DurationS     float64       `json:"duration_s"`
	CPUS          float64       `json:"cpu_s"`
	CPUNsPerChunk float64       `json:"cpu_ns_per_chunk"`
	ChunksPerS    float64       `json:"chunks_per_s"`
	Pinning       bench.Pinning `json:"pinning"`
	Host          harness.Host  `json:"host"`
}

// memSource is a source that fills whatever buffer it is given, at once
// and without touching it, until stopped.
type memSource struct {
	name string
	stop *atomic.Bool
}

func (m *memSource) Name() string               { return m.name }
func (m *memSource) Open(context.Context) error { return nil }
func (m *memSource) Close() error               { return nil }

func (m *memSource) Read(p []byte) (int, error) {
	if m.stop.Load() {
		return 0, io.EOF
	}
	return len(p), nil
}

// Floor runs the `floor` command.
func Floor(ctx context.Context, c FloorConfig, ios harness.IO) (*FloorReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	pin, unpin := bench.PinApart(c.Pin)
	defer unpin()
	var chunks, bytes, ended atomic.Uint64
	allEnded := make(chan struct{})
	handle := func(ch engine.Chunk) {
		if len(ch.Data) > 0 {
			chunks.Add(1)
			bytes.Add(uint64(len(ch.Data)))
		}
		if ch.Flags&srcs.EndOfStream != 0 && ended.Add(1) == uint64(c.Sources) {
			close(allEnded)
		}
		ch.Release()
	}
	e, err := engine.New(c.Engine.Config(engine.RunnerGoroutine), engine.WithHandler(handle),
		engine.WithErrorHandler(func(error) {}))
	if err != nil {
		return nil, err
	}
	defer bench.ShutdownEngine(e)
	var stop atomic.Bool
	cpu0 := harness.CPUTime()
	t0 := time.Now()
	for i := range c.Sources {
		if _, err := e.AddSource(&memSource{name: "mem://" + strconv.Itoa(i), stop: &stop}); err != nil {
			return nil, fmt.Errorf("bench: floor: %w", err)
		}
	}
	select {
	case <-time.After(c.Duration):
	case <-ctx.Done():
	}
	stop.Store(true)
	select {
	case <-allEnded:
	case <-time.After(bench.ShutdownTimeout):
		return nil, errors.New("bench: floor: sources did not end")
	}
	el := time.Since(t0)
	cpu := harness.CPUTime() - cpu0
	rep := &FloorReport{Command: "floor", Runner: e.Stats().Runners[len(e.Stats().Runners)-1].Runner, Sources: c.Sources,
		Chunks: chunks.Load(), Bytes: bytes.Load(), DurationS: el.Seconds(), CPUS: cpu.Seconds(), Pinning: pin, Host: harness.HostInfo()}
	if rep.Chunks > 0 {
		rep.CPUNsPerChunk = float64(cpu.Nanoseconds()) / float64(rep.Chunks)
		rep.ChunksPerS = float64(rep.Chunks) / rep.DurationS
	}
	fmt.Fprintf(ios.Out, "floor: %d in-memory sources, runner %s: %s chunks (%s) in %.2fs, %.0f chunks/s, %.0f ns of CPU per chunk; %s\n",
		rep.Sources, rep.Runner, strconv.FormatUint(rep.Chunks, 10), report.FormatBytes(rep.Bytes), rep.DurationS, rep.ChunksPerS, rep.CPUNsPerChunk, floorPinNote(pin))
	if c.JSON != "" {
		if err := harness.WriteJSON(c.JSON, rep, ios); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

func floorPinNote(p bench.Pinning) string {
	if p.Enabled {
		return fmt.Sprintf("engine on CPUs %v", p.EngineCPUs)
	}
	return "no pinning: " + p.Note
}
