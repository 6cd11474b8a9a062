package engine

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/sluice-io/sluice/pool"
)

// Runner names accepted by Config.Runner and the SLUICE_RUNNER override.
const (
	RunnerAuto      = "auto"
	RunnerURing     = "uring"
	RunnerEpoll     = "epoll"
	RunnerGoroutine = "goroutine"
	RunnerThread    = "thread"
)

// EnvRunner names the environment variable that overrides Config.Runner,
// for debugging and benchmarks.
const EnvRunner = "SLUICE_RUNNER"

// Config is the engine's configuration. It is plain data: a zero field
// takes the default documented on it, and New validates the result,
// failing with a *ConfigError that names the field.
type Config struct {
	// Runner is "auto" (the default), "uring", "epoll", "goroutine" or
	// "thread". Auto walks io_uring, then epoll, then goroutines, and logs
	// why it skipped each step. An explicit runner that cannot work is an
	// error, never a silent downgrade. SLUICE_RUNNER overrides it.
	// Sources without a descriptor (a tail, srcs.NewTail) and TLS
	// sessions always run on the goroutine runner, beside the chosen one.
	Runner string `yaml:"runner"`
	// Workers is the number of event-loop workers of the uring and epoll
	// runners, each an OS-thread-locked goroutine. Default: GOMAXPROCS,
	// at most 8.
	Workers int `yaml:"workers"`
	// BufSize is the size of each source buffer. Default 64 KiB.
	BufSize int `yaml:"buf_size"`
	// Buffers is the number of buffers in the source pool. Default 1024.
	Buffers int `yaml:"buffers"`
	// MaxPerSource caps the buffers one source may hold, including those
	// not yet released by processing. Default: a quarter of Buffers.
	MaxPerSource int `yaml:"max_per_source"`
	// MaxPoolBytes caps Buffers*BufSize. Default pool.DefaultMaxBytes.
	MaxPoolBytes int64 `yaml:"max_pool_bytes"`
	// PrefaultPool maps the source pool populated (pool.Config.Prefault):
	// every page resident from New on, so that no read waits for a page
	// fault. By default a page becomes resident when a buffer first
	// receives data, so an idle engine holds little memory (the default
	// pool is 64 MiB) and a busy one grows to what its traffic uses.
	PrefaultPool bool `yaml:"prefault_pool"`
	// PoolReturnAfter gives the pages of a pool buffer that stayed free
	// this long back to the kernel (pool.Config.ReturnAfter), so that an
	// engine that took a burst of traffic shrinks back to what its
	// traffic keeps using, as Go's heap does. Zero means the default, a
	// minute; negative keeps every page (so does PrefaultPool).
	PoolReturnAfter time.Duration `yaml:"pool_return_after"`
	// Flush is the default flush timeout: a partly filled buffer is
	// delivered (flag Partial) this long after its first byte. Zero means
	// the default, 5ms; a negative value means deliver after every read.
	Flush time.Duration `yaml:"flush"`
	// BatchWait is the latency the uring runner may add to gather
	// completions while it is busy: a worker woken more often than this
	// waits for a batch of completions, or BatchWait, before it wakes,
	// instead of waking for each one, so that under load each wake-up does
	// more work. It batches only while no source waits for a pool buffer
	// and several sources wait for data; an idle worker still wakes at
	// once for its first completion. While fewer than 128 sources wait
	// on a worker, all of them stream sockets, and each wake-up brings
	// them less than eight buffers, the wait holds them back even when
	// all of them have data (one stream too): for a time that doubles
	// from 50µs up to BatchWait while wake-ups stay small and halves
	// while they bring more than 32 buffers, so streams fast enough to
	// keep the worker busy are not held.
	// Commands that arrive during a batch (adding or removing a source)
	// may wait up to BatchWait too. The wait does not add to a socket's
	// flush timeout: the uring runner holds its partial data for the
	// timeout less BatchWait (a source's own timeout no longer than
	// BatchWait is kept whole), so bytes are delivered within the timeout
	// of their arrival, as under the other runners. Zero means the
	// default: 2ms, or two fifths of Flush if that is less (a wider window
	// batches more; docs/decisions/0005-load-paced-waits.md says how 2ms
	// was chosen); negative turns batching off. It must stay below Flush. It needs
	// Linux 6.12 (IORING_FEAT_MIN_TIMEOUT); older kernels wake for every
	// completion.
	BatchWait time.Duration `yaml:"batch_wait"`
	// QueueHigh and QueueLow are the delivery queue's watermarks, in
	// chunks: above QueueHigh undelivered chunks the runner pauses new
	// reads, and below QueueLow it resumes. Defaults: 3/4 and 1/2 of
	// Buffers.
	QueueHigh int `yaml:"queue_high"`
	QueueLow  int `yaml:"queue_low"`
	// Handlers is the number of processing goroutines that run the push
	// handler (WithHandler). A source's chunks always go to the same
	// handler goroutine, in order. Default: GOMAXPROCS.
	Handlers int `yaml:"handlers"`
	// Delivery says where the push handler runs: "queue" (the default)
	// on the processing goroutines, apart from the I/O workers; "inline"
	// where each chunk was read, on a uring or epoll worker's thread or
	// the source's own goroutine, as WithInlineHandler does. Inline costs
	// no queue and no thread wake-up per chunk, but a slow handler holds
	// up every source of its worker, and the pool is then the only
	// backpressure. It needs a handler: pull mode (Next) always queues.
	Delivery string `yaml:"delivery"`
	// MaxThreads caps the thread runner's OS threads. Default 8000, below
	// Go's default limit of 10,000 (runtime/debug.SetMaxThreads); a larger
	// value raises that limit.
	MaxThreads int `yaml:"max_threads"`
	// FileSlots is the size of each uring worker's registered file table:
	// a connection a listener accepted for the uring runner lives there,
	// as a direct descriptor, instead of in the process's descriptor
	// table, so that RLIMIT_NOFILE bounds the connections of one worker
	// rather than of the whole process. A worker registers its table on
	// its first connection; past its size, connections keep ordinary
	// descriptors. The kernel caps a table at the soft RLIMIT_NOFILE at
	// registration and keeps 8 bytes per slot. Zero means the default:
	// that limit, at most 65,536; negative turns the tables off. Other
	// runners ignore it.
	FileSlots int `yaml:"file_slots"`
}

// Where the push handler runs (Config.Delivery).
const (
	DeliveryQueue  = "queue"
	DeliveryInline = "inline"
)

// Defaults.
const (
	DefaultBufSize    = 64 << 10
	DefaultBuffers    = 1024
	DefaultFlush      = 5 * time.Millisecond
	DefaultBatchWait  = 2 * time.Millisecond
	DefaultMaxThreads = 8000
	// DefaultMaxFileSlots caps the default FileSlots.
	DefaultMaxFileSlots = 1 << 16
	// MaxFileSlots is the most FileSlots may be: the kernel's
	// IORING_MAX_FIXED_FILES.
	MaxFileSlots = 1 << 20
)

// ConfigError reports a bad Config field.
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("engine: config: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// withDefaults fills zero fields and validates everything.
func (c Config) withDefaults() (Config, error) {
	procs := runtime.GOMAXPROCS(0)
	if c.Runner == "" {
		c.Runner = RunnerAuto
	}
	switch c.Runner {
	case RunnerAuto, RunnerURing, RunnerEpoll, RunnerGoroutine, RunnerThread:
	default:
		return c, &ConfigError{"Runner", c.Runner, "must be auto, uring, epoll, goroutine or thread"}
	}
	if c.Workers < 0 || c.Workers > 1024 {
		return c, &ConfigError{"Workers", c.Workers, "must be from 0 (default) to 1024"}
	}
	if c.Workers == 0 {
		c.Workers = min(procs, 8)
	}
	if c.BufSize == 0 {
		c.BufSize = DefaultBufSize
	}
	if c.Buffers == 0 {
		c.Buffers = DefaultBuffers
	}
	if c.Flush == 0 {
		c.Flush = DefaultFlush
	}
	if c.Flush < 0 {
		c.Flush = 0
	}
	switch {
	case c.BatchWait == 0:
		c.BatchWait = min(DefaultBatchWait, c.Flush*2/5)
	case c.BatchWait < 0:
		c.BatchWait = 0
	case c.BatchWait >= c.Flush:
		return c, &ConfigError{"BatchWait", c.BatchWait, fmt.Sprintf("must be below Flush (%v)", c.Flush)}
	}
	if c.QueueHigh < 0 || c.QueueLow < 0 {
		return c, &ConfigError{"QueueHigh", c.QueueHigh, "watermarks must not be negative"}
	}
	if c.QueueHigh == 0 {
		c.QueueHigh = max(1, c.Buffers*3/4)
	}
	if c.QueueLow == 0 {
		c.QueueLow = min(c.QueueHigh-1, c.Buffers/2)
	}
	if c.QueueLow >= c.QueueHigh {
		return c, &ConfigError{"QueueLow", c.QueueLow, fmt.Sprintf("must be below QueueHigh (%d)", c.QueueHigh)}
	}
	if c.Handlers < 0 || c.Handlers > 4096 {
		return c, &ConfigError{"Handlers", c.Handlers, "must be from 0 (default) to 4096"}
	}
	if c.Handlers == 0 {
		c.Handlers = procs
	}
	switch c.Delivery {
	case "":
		c.Delivery = DeliveryQueue
	case DeliveryQueue, DeliveryInline:
	default:
		return c, &ConfigError{"Delivery", c.Delivery, `must be "queue" or "inline"`}
	}
	if c.MaxThreads < 0 {
		return c, &ConfigError{"MaxThreads", c.MaxThreads, "must not be negative"}
	}
	if c.MaxThreads == 0 {
		c.MaxThreads = DefaultMaxThreads
	}
	if c.FileSlots > MaxFileSlots {
		return c, &ConfigError{"FileSlots", c.FileSlots, fmt.Sprintf("must be at most %d (the kernel's IORING_MAX_FIXED_FILES), or negative for none", MaxFileSlots)}
	}
	// The pool validates its own shape; report its errors under our names.
	pc, err := c.poolConfig().Validate()
	if err != nil {
		var pe *pool.ConfigError
		if !errors.As(err, &pe) {
			return c, err
		}
		field := pe.Field
		if field == "MaxBytes" {
			field = "MaxPoolBytes"
		}
		return c, &ConfigError{field, pe.Value, pe.Reason}
	}
	c.PoolReturnAfter = pc.ReturnAfter
	return c, nil
}

func (c Config) poolConfig() pool.Config {
	return pool.Config{BufSize: c.BufSize, Buffers: c.Buffers, MaxPerSource: c.MaxPerSource, MaxBytes: c.MaxPoolBytes,
		Prefault: c.PrefaultPool, ReturnAfter: c.PoolReturnAfter}
}

// Resolved returns c as New would run it: every zero field set to its
// default (Workers and Handlers follow GOMAXPROCS), or the *ConfigError
// New would return. It probes nothing; SLUICE_RUNNER is not applied.
func (c Config) Resolved() (Config, error) { return c.withDefaults() }

// Validate checks c as New would, without probing the kernel or mapping
// anything: the error is the *ConfigError New would return.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}
