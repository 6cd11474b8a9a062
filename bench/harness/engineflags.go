package harness

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"

	// TLS for the listeners the flags ask for.
	_ "github.com/sluice-io/sluice/srcs/trust"
)

// AllRunners returns every runner name, in the default comparison order.
func AllRunners() []string {
	return []string{engine.RunnerURing, engine.RunnerEpoll, engine.RunnerGoroutine, engine.RunnerThread}
}

// EngineFlags are the engine settings every command exposes. Zero fields
// take the engine's defaults (see engine.Config).
type EngineFlags struct {
	Pool    int           // buffers in the source pool (--pool)
	Buf     report.Size   // size of each buffer (--buf)
	Workers int           // event-loop workers (--workers)
	Flush   time.Duration // flush timeout (--flush); negative: every read
	// BatchWait bounds what the uring runner may wait to batch
	// completions (--batch-wait); negative: never.
	BatchWait time.Duration
	MaxConns  int // listener connection cap (--max-conns)
	// RecvBuffer is SO_RCVBUF of the engine's TCP listeners, inherited by
	// the connections they accept (--recv-buffer); zero: automatic
	// (srcs.ListenerConfig.RecvBuffer), negative: the kernel's autotuning
	// always (--recv-buffer kernel).
	RecvBuffer recvBuffer
	// Framing names the listeners' framer, as srcs.ParseFraming reads it
	// (--framing, on the commands that take it); "" or "none": raw bytes.
	Framing string
	// Inline runs the consumer where each chunk was read
	// (engine.WithInlineHandler) instead of on processing goroutines
	// (--inline).
	Inline bool
	// TLS puts the listeners on TLS (run --tls).
	TLS *srcs.TLSConfig `json:",omitempty"`
	// FileSlots sizes each uring worker's registered file table
	// (engine.Config.FileSlots; idle --file-slots): zero for the
	// engine's default, negative for none.
	FileSlots int `json:",omitempty"`
}

func (f EngineFlags) Config(runner string) engine.Config {
	return engine.Config{Runner: runner, Buffers: f.Pool, BufSize: int(f.Buf), Workers: f.Workers, Flush: f.Flush, BatchWait: f.BatchWait,
		FileSlots: f.FileSlots}
}

// Handler returns the engine option that delivers to h: inline with
// --inline, else on processing goroutines.
func (f EngineFlags) Handler(h engine.Handler) engine.Option {
	if f.Inline {
		return engine.WithInlineHandler(h)
	}
	return engine.WithHandler(h)
}

func (f *EngineFlags) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.Pool, "pool", f.Pool, "buffers in the source pool (default 1024)")
	fs.Var(&f.Buf, "buf", "size of each pool buffer, e.g. 64KiB (default 64KiB)")
	fs.IntVar(&f.Workers, "workers", f.Workers, "event-loop workers of uring and epoll (default GOMAXPROCS, at most 8)")
	fs.DurationVar(&f.Flush, "flush", f.Flush, "flush timeout for partly filled buffers (default 5ms; negative: every read)")
	fs.DurationVar(&f.BatchWait, "batch-wait", f.BatchWait, "latency the uring runner may add to batch completions (default 2ms or two fifths of --flush; negative: none)")
	fs.BoolVar(&f.Inline, "inline", f.Inline, "run the consumer (the CRC and record count) where each chunk was read, on the runner's worker or the source's goroutine, as gnet's handlers run (engine.WithInlineHandler); default: on the engine's processing goroutines")
}

// RegisterListen defines the flags of the engine's TCP listeners, for the
// commands that listen.
func (f *EngineFlags) RegisterListen(fs *flag.FlagSet) {
	fs.Var(&f.RecvBuffer, "recv-buffer", "SO_RCVBUF of the connections the engine's listeners accept, e.g. 1MiB, or kernel: the kernel's autotuning for every one (default: automatic, autotuning until a listener holds 16 connections, then 256 KiB; docs/decisions/0024-receive-buffers.md)")
	fs.IntVar(&f.FileSlots, "file-slots", f.FileSlots, fmt.Sprintf("size of each uring worker's registered file table, where accepted connections need no descriptor of the sink's (default: the soft RLIMIT_NOFILE, at most %d; negative: none)", engine.DefaultMaxFileSlots))
}

func (f EngineFlags) Validate() error {
	switch {
	case f.Pool < 0:
		return fmt.Errorf("--pool: %d: must not be negative", f.Pool)
	case f.Buf < 0:
		return errors.New("--buf: must not be negative")
	case f.Workers < 0:
		return fmt.Errorf("--workers: %d: must not be negative", f.Workers)
	case f.MaxConns < 0:
		return fmt.Errorf("--max-conns: %d: must not be negative", f.MaxConns)
	case f.FileSlots > engine.MaxFileSlots:
		return fmt.Errorf("--file-slots: %d: must be at most %d (the kernel's most), or negative for none", f.FileSlots, engine.MaxFileSlots)
	}
	pc, err := f.PoolConfig()
	if err != nil {
		return err
	}
	return f.validateFraming(pc.MaxPerSource)
}

// PoolConfig returns the pool's shape with the engine's defaults applied,
// or an error naming the flag at fault: the pool judges the shape.
func (f EngineFlags) PoolConfig() (pool.Config, error) {
	pc := pool.Config{Buffers: f.Pool, BufSize: int(f.Buf)}
	if pc.Buffers == 0 {
		pc.Buffers = engine.DefaultBuffers
	}
	if pc.BufSize == 0 {
		pc.BufSize = engine.DefaultBufSize
	}
	pc, err := pc.Validate()
	if err != nil {
		var ce *pool.ConfigError
		if errors.As(err, &ce) {
			return pc, fmt.Errorf("%s: %v", engineFlag(ce.Field), err)
		}
		return pc, err
	}
	return pc, nil
}

// engineFlag names the flag behind an engine.Config field.
func engineFlag(field string) string {
	switch field {
	case "Buffers", "MaxBytes", "MaxPoolBytes", "MaxPerSource", "QueueHigh", "QueueLow":
		return "--pool"
	case "BufSize":
		return "--buf"
	case "Workers":
		return "--workers"
	case "Flush":
		return "--flush"
	case "FileSlots":
		return "--file-slots"
	}
	return "engine"
}

// Args returns the command-line flags that give a `sink` child the same
// engine settings: only those set, so the child's defaults stay the
// engine's.
func (f EngineFlags) Args() []string {
	var a []string
	if f.Pool != 0 {
		a = append(a, "--pool", strconv.Itoa(f.Pool))
	}
	if f.Buf != 0 {
		a = append(a, "--buf", strconv.FormatInt(int64(f.Buf), 10))
	}
	if f.Workers != 0 {
		a = append(a, "--workers", strconv.Itoa(f.Workers))
	}
	if f.Flush != 0 {
		a = append(a, "--flush", f.Flush.String())
	}
	if f.BatchWait != 0 {
		a = append(a, "--batch-wait", f.BatchWait.String())
	}
	if f.MaxConns != 0 {
		a = append(a, "--max-conns", strconv.Itoa(f.MaxConns))
	}
	if f.RecvBuffer != 0 {
		a = append(a, "--recv-buffer", f.RecvBuffer.String())
	}
	if f.Framing != "" && f.Framing != "none" {
		a = append(a, "--framing", f.Framing)
	}
	if f.Inline {
		a = append(a, "--inline")
	}
	if f.FileSlots != 0 {
		a = append(a, "--file-slots", strconv.Itoa(f.FileSlots))
	}
	return a
}

// framingHelp is the flag's help, shared by the commands that take it.
const framingHelp = "frame every connection into records: none, newline[:MAX], length:N{be,le}[:MAX] (N 1, 2, 4 or 8), " +
	"octet[:MAX] (RFC 6587) or mqtt[:MAX]; the reports count records"

// RegisterFraming defines --framing; more is appended to the help.
func (f *EngineFlags) RegisterFraming(fs *flag.FlagSet, more string) {
	if f.Framing == "" {
		f.Framing = "none"
	}
	fs.StringVar(&f.Framing, "framing", f.Framing, framingHelp+more)
}

// Framer returns the framer --framing names; nil for raw bytes.
func (f EngineFlags) Framer() (srcs.Framer, error) {
	fr, err := srcs.ParseFraming(f.Framing)
	if err != nil {
		return nil, fmt.Errorf("--framing: %v", err)
	}
	return fr, nil
}

// FramingName names f as --framing reads it: "none" for raw bytes.
func FramingName(f srcs.Framer) string {
	if f == nil {
		return "none"
	}
	return f.String()
}

// validateFraming checks --framing, and that the pool lets a framed source
// hold the two buffers it may need (a full one and the next one for the
// tail record); maxPerSource is the pool's cap with defaults applied.
func (f EngineFlags) validateFraming(maxPerSource int) error {
	fr, err := f.Framer()
	if err != nil || fr == nil {
		return err
	}
	if maxPerSource < 2 {
		return fmt.Errorf("--pool: a framed source (--framing %s) needs 2 buffers, but a pool this small allows each source %d (a quarter of --pool): use --pool 8 or more",
			fr, maxPerSource)
	}
	return nil
}

// WriteJSON writes v indented to path, or to ios.Out for "-".
func WriteJSON(path string, v any, ios IO) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: json: %w", err)
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = ios.Out.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("bench: --json: %w", err)
	}
	fmt.Fprintf(ios.Err, "sluice-bench: wrote %s\n", path)
	return nil
}

// recvBuffer is --recv-buffer: a size, or "kernel" (stored as -1) for the
// kernel's autotuning on every connection. It implements flag.Value.
type recvBuffer int64

func (r *recvBuffer) Set(v string) error {
	if strings.TrimSpace(v) == "kernel" {
		*r = -1
		return nil
	}
	n, err := report.ParseSize(v)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%q: must not be negative (kernel: the kernel's autotuning)", v)
	}
	*r = recvBuffer(n)
	return nil
}

func (r recvBuffer) String() string {
	if r < 0 {
		return "kernel"
	}
	return strconv.FormatInt(int64(r), 10)
}
