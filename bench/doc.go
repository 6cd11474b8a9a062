// Package bench is the measurement every sluice-bench scenario makes: one
// runner's engine, in a child process of its own (measure-child), under a
// load started as another (the built-in generator of bench/load), with
// the collector that checks every byte that arrives, the Result row with
// its verdicts and spreads over rounds, and the shared charts. The
// scenarios are rooms of their own, one per command (bench/run,
// bench/sink, bench/latency, bench/arrivals, bench/file, bench/floor,
// bench/idle, bench/jetstream, bench/probe, bench/wirecheck), on this
// measurement; bench/harness holds the processes and the machine,
// bench/load the built-in generators and fio's jobs, bench/peers the
// reference sinks, bench/report the shared figures. cmd/sluice-bench is a
// thin driver that parses flags into each scenario's config struct and
// calls its entry point. It holds no package-level mutable state. The
// entry points are not safe for concurrent use with each other: run,
// latency and arrivals pin the whole process to CPUs and set GOMAXPROCS
// while they measure.
//
// # Measuring
//
// `run` and `latency` start the load generator as a separate process (the
// same binary, hidden subcommand `gen`), so its CPU time is not charged to
// the engine. With two or more CPUs the engine process is pinned to the
// first half of the allowed CPUs (rounded up) and the generator to the rest
// (sched_setaffinity on every thread; GOMAXPROCS follows). On a 2-core
// machine that is one core each. --pin=false turns it off.
//
// # The wire
//
// run --wire auto (the default) puts the sink and the load on either end
// of a veth wire when it can (as root, with iproute2's ip command): the
// sink's process in one network namespace, the load's (the generator, fio,
// or a reference peer's client) in another, joined by a veth pair with the
// link-local addresses WireSinkIP and WireLoadIP, which exist nowhere
// else. Each end's receive queue steers its packets to its own side's CPUs
// (rps_cpus), so each side receives and transmits its own packets, as two
// hosts do; on loopback the sender's packets are received on the sender's
// CPU, and a window update from the sink runs the sender's transmit on the
// sink's CPU, which hands a sink that batches the sender's work. Children
// enter a namespace through `ip netns exec`, which execs them in place.
// The namespaces are named after the run's PID, removed on every return
// (a signal cancels the run; a panic on the run's goroutine unwinds
// through the teardown), and a later run removes those of a run that died
// without. Where the wire cannot be built, auto says why once and measures
// over loopback, and the report says so (--wire loopback asks for it;
// --wire veth fails instead). wire-check shows, per CPU, where one round's
// packets were received.
//
// Every row gives, beside the sink process's CPU, the receiving core's
// whole busy time over the same interval: user, nice, system, irq and
// softirq of the sink's CPUs from /proc/stat (core_cpu_s, its softirq part
// core_softirq_s), and the load's CPUs' busy time (load_core_cpu_s), each
// also per GiB. A process's CPU time holds only the part of the kernel's
// receive work that happened to run in its context; the core holds all of
// it, and anything else that ran there, so it is read on a quiet machine.
// On the veth wire a --target on cpu_s_per_gib is judged by the core
// (core_cpu_s_per_gib), and the limit column reads the cores.
//
// Each runner, in each round (each load point of latency), is hosted in
// a fresh child process (hidden subcommand measure-child) that inherits
// the engine's CPUs, so one runner's threads, RSS and heap never inflate
// the next one's; --in-process measures in the parent instead. The child
// starts an engine listening on the wire's sink address (127.0.0.1 on
// loopback) and the generator, which dials
// every connection (at most --max-dial at a time), says ready, and waits;
// once the engine has accepted every connection the measured interval
// starts and the generator sends for --duration, then closes. The interval
// ends when every source has delivered its end of stream. Over it the
// child measures its own getrusage (RUSAGE_SELF, user+sys), polls
// /proc/self/status for the maximum OS threads and RSS, counts pool waits
// and partial flushes, takes the deltas of the runner's counters
// (engine.RunnerStats): completions per enter, waits and wake-ups per
// second, syscalls per MiB, and samples a quarter, half and three
// quarters into the run how many bytes wait unread in its connections'
// receive queues (/proc/net/tcp): tens of KiB per source mean the engine
// fell behind and the senders wait for window (the samples' own CPU time,
// which grows with every socket on the machine, is left out of the
// engine's). It writes its result to the parent as JSON, latency
// histograms included.
//
// Every message starts with a 16-byte header: its scheduled send time and
// the time the generator actually wrote it (UnixNano, little-endian; one
// stamp per write, taken just before the system call), read against the
// same clock in the consumer. Messages have a fixed size, so the consumer
// finds the headers by offset whatever the chunk boundaries, and records
// two latencies in HdrHistograms: engine latency (delivery minus actual
// send) and end-to-end latency (delivery minus schedule; with --rate the
// generator is open loop, so a generator that falls behind stays visible
// there instead of being omitted). The generator reports its own lag
// (actual minus scheduled send) as percentiles, and the fraction of the
// offered load it wrote within --duration. A row whose generator held
// less than 97% of the offered load, or lagged more than 1 ms at p99, is
// generator-bound: it measures the generator and never gets a verdict.
// Unpaced rows name their bottleneck from both sides' CPU use (generator,
// engine, kernel/both, or neither).
//
// The generator runs one OS-thread-locked shard per CPU it may use; a
// shard owns its connections, keeps paced arrivals in a min-heap, writes
// with non-blocking writes on the raw descriptors, keeps the unsent tail
// on EAGAIN, and waits in ppoll. Paced, it writes every message on its
// own at its own time (--gen-pacing spread, the default: it sleeps with a
// timer slack of 1 ns until the next arrival), as independent senders
// would; --gen-pacing batch is the bursty pacing, which wakes with the
// default 50 µs slack and writes every message due by then back to back,
// those of one connection in one write, and which a batching engine
// finds kinder (see `arrivals`). It reports, per connection, the bytes and
// CRC-32C it sent; the engine side checksums what it received and any
// difference fails the command (exit status 1) with MISMATCH lines.
package bench
