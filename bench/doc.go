// Package bench is the benchmark harness behind the sluice-bench CLI: load
// generators, measurement and reports. It holds no global state; the CLI in
// bench/cmd/sluice-bench is a thin driver that parses flags into the config
// structs here (RunConfig, SinkConfig, FileConfig, LatencyConfig,
// ProbeConfig, GenConfig) and calls Run, Sink, File, LatencySweep, Probe or
// RunGen. The entry points are not safe for concurrent use with each other:
// run and latency pin the whole process to CPUs and set GOMAXPROCS while
// they measure.
//
// # Measuring
//
// `run` and `latency` start the load generator as a separate process (the
// same binary, hidden subcommand `gen`), so its CPU time is not charged to
// the engine. With two or more CPUs the engine process is pinned to the
// first half of the allowed CPUs (rounded up) and the generator to the rest
// (sched_setaffinity on every thread; GOMAXPROCS follows). On a 2-core
// machine that is one core each, which is best effort: softirq work of the
// loopback path still lands where the kernel puts it. --pin=false turns it
// off.
//
// For each runner a fresh engine listens on 127.0.0.1; the generator dials
// every connection (at most --max-dial at a time), says ready, and waits;
// once the engine has accepted every connection the measured interval
// starts and the generator sends for --duration, then closes. The interval
// ends when every source has delivered its end of stream. Over it the
// engine side measures its own getrusage (RUSAGE_SELF, user+sys), polls
// /proc/self/status for the maximum OS threads and RSS (VmHWM is reset per
// runner through /proc/self/clear_refs), and counts pool waits and partial
// flushes. Every message starts with an 8-byte little-endian send timestamp
// (time.Now().UnixNano() in the generator, read against the same clock in
// the consumer); messages have a fixed size, so the consumer finds them by
// offset whatever the chunk boundaries, and records the delivery latency in
// an HdrHistogram. With --rate the generator is open loop: each message is
// stamped with its scheduled arrival time, so a generator that falls
// behind shows as latency, and its own lateness is reported as gen lag.
// The generator reports, per connection, the bytes and CRC-32C it sent;
// the engine side checksums what it received and any difference fails the
// command (exit status 1) with MISMATCH lines.
//
// Fairness is Jain's index over per-source bytes, each divided by the
// source's share of the offered load, so that deliberately skewed load
// still scores 1 when every source got its share.
//
// # Skew
//
// --skew F follows the Verona seed's biased connections: the first
// round(F·N) sources (at least one) are hot and together are offered a
// fraction 1−F of the load, the other sources share F. F=0.2 means 20% of
// the sources carry 80% of the bytes. The total offered load stays
// N·--rate. Skew needs --rate.
//
// # The default run
//
// `sluice-bench run` with no flags, what `make bench` runs: every runner
// available here in the order uring, epoll, goroutine, thread; 200
// sources; 16 KiB messages; unlimited rate; 5 s per runner; one round. It
// takes about 25 s on a 2-core machine.
//
// # JSON reports
//
// run --json FILE writes an object:
//
//	{"command": "run", "ok": true,
//	 "host": {"kernel", "go", "os", "arch", "cpus"},
//	 "pinning": {"enabled", "engine_cpus", "gen_cpus", "note"},
//	 "config": {"sources", "duration_s", "msg_size", "rate_bps", "arrivals", "skew", "rounds",
//	            "pool", "buf", "workers", "flush_ns", "verify"},
//	 "runs": [RESULT, ...],     // one per runner and round, in the order measured
//	 "summary": [RESULT, ...],  // one per runner, rounds merged
//	 "skipped": [{"runner", "reason"}]}
//
// where RESULT is
//
//	{"runner", "round", "sources", "bytes", "duration_s", "throughput_bps",
//	 "cpu_s", "cpu_s_per_gib", "threads_max", "rss_max_bytes",
//	 "latency_ns": {"count", "p50", "p99", "p999", "max", "mean"},
//	 "fairness_jain", "pool_waits", "partial_flushes", "chunks", "errors",
//	 "offered_bps", "gen_sent_bytes", "gen_cpu_s", "gen_lag_max_ns",
//	 "verified", "mismatches", "profile", "top_functions", "rounds"}
//
// latency --json writes {"command": "latency", "host", "pinning",
// "sources", "msg_size", "arrivals", "points": [RESULT + "offered_bps"],
// "skipped", "ok"}. sink writes the report described in SinkReport (one
// entry per stream with source, peer, bytes, crc32c and errors). file
// writes {"command": "file", "files", "passes", "buf", "results":
// [{"method", "bytes", "duration_s", "throughput_bps", "cpu_s",
// "cpu_s_per_gib", "vs_fio", "vs_read_loop"}], "fio_note"}. probe
// --json writes {"io_uring", "auto", "decisions", "runners"}. jetstream
// writes JetStreamReport.
//
// # Ingest node
//
// `sink --config FILE` is not a benchmark: it runs RunNode, a long-lived
// ingest node configured by a YAML NodeConfig (examples/node.yaml), with
// Prometheus metrics (--metrics), an optional JetStream output, and a
// drain on SIGINT or SIGTERM. `jetstream` measures that output: the NATS
// server (hidden subcommand `natsd`) and the generator (`jsgen`) run as
// processes of their own, so each one's getrusage is its own.
package bench
