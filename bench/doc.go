// Package bench is the benchmark harness behind the sluice-bench CLI: load
// generators, measurement and reports. It holds no global state; the CLI in
// bench/cmd/sluice-bench is a thin driver that parses flags into the config
// structs here (RunConfig, SinkConfig, FileConfig, LatencyConfig,
// ArrivalsConfig, ProbeConfig, GenConfig, FloorConfig, SoakConfig) and
// calls Run, Sink, File, LatencySweep, ArrivalsStudy, Probe, Floor, Soak
// or RunGen. The entry points are not safe for concurrent use with each
// other: run, latency and arrivals pin the whole process to CPUs and set
// GOMAXPROCS while they measure.
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
// would; --gen-pacing batch is the old pacing, which woke with the
// default 50 µs slack and wrote every message due by then back to back,
// those of one connection in one write, and which a batching engine
// found kinder (see `arrivals`). It reports, per connection, the bytes and
// CRC-32C it sent; the engine side checksums what it received and any
// difference fails the command (exit status 1) with MISMATCH lines.
//
// # fio as the client
//
// run --client fio sends the load with fio's net engine instead: a job,
// thread and TCP connection per source (at most 4096), time-based for
// --duration, writes of --msg-size (fio's bs), --rate per job with
// Poisson (or, with --arrivals uniform, linear) arrivals, TCP_NODELAY as
// Go's dialer sets it, and with --framing newline every write a whole
// number of --record-size lines (buffer_pattern, scramble_buffers=0).
// Every row's sink runs in a process of its own: `sink --until-idle` for
// a runner, the gnet sink for gnet, both on the engine's CPUs; fio runs on
// the others, pinned from its first instruction (forked from a thread
// pinned for the purpose) and with cpus_allowed. A row's figures are the
// sink's own report: the throughput while every connection was sending
// (or 90% of them, or from first byte to last), since fio starts its jobs
// one by one, and the CPU time per GiB over the same interval, from the
// CPU time and bytes the sink samples every 100 ms (usage; over the whole
// time it listened when the throughput is from first byte to last:
// cpu_over says which, and cpu_s_per_gib_listened is always the latter). They are reconciled with fio's JSON report, and any difference
// fails the run: the bytes of every connection (sorted, since fio's jobs
// do not name their ports) against every job's io_bytes plus the 8-byte
// trailer fio's net engine sends on close, the number of connections,
// errors, and with newline records each connection's lines and the bytes
// after its last. fio's net engine sends every write but a job's last
// with MSG_MORE, which corks it: the kernel holds small writes until a
// segment fills or the receiver's ACK releases them, so a paced job's
// 1 KiB writes reach the sink as segments of several KiB, clocked by the
// sink's delayed ACKs (see `arrivals`).
//
// # gnet
//
// --peers gnet adds a row measured in the same rounds, in the same
// alternating order, as the runners: a gnet v2 sink (bench/gnetsink, a
// module of its own so that gnet never enters sluice's module graph)
// doing the consumer's job inline on its event loops, one per engine CPU:
// CRC-32C of every connection, '\n' records counted with --framing
// newline. The bench builds it with the go command into the user cache
// directory on first use (--gnet-sink takes a ready one). Under the
// built-in generator it is measured as the runners are (from the word to
// send until the last connection closed), its streams verified against
// the generator's, without latency figures.
//
// --peers go adds the sink a user would write with Go's standard library
// alone, the same program run with -net std: net.Listen and a goroutine
// per connection reading into a 64 KiB buffer, the same work after every
// read. With --tls it adds a go+tls row as well, that sink behind a
// crypto/tls listener with the run's certificate, right after the
// engine's TLS row, and the report compares go+tls with go: what TLS
// costs when nothing but Go carries it.
//
// # Datagrams
//
// run --proto udp measures UDP sinks (udp.go): with --client fio, fio's net
// engine with protocol=udp sends --msg-size datagrams from --sources jobs
// (at most 64) to one UDP port at --udp-rate datagrams per second over them
// all, or flat out; with --client gen, the hidden udpgen command does from
// up to 10,000 sockets, for the shape fio cannot make. Each row's sink
// receives on that port in a process of its own, with --udp-read-buffer as
// SO_RCVBUF: `sink --proto udp` for a runner (one engine UDP source; its
// chunks' datagrams counted with srcs.ForEachDatagram), gnetsink -proto udp
// for the peers (gnet's udp:// loops, or one ReadFromUDP loop with -net
// std). A row reports the datagrams the load offered (fio's total_ios) and
// the sink delivered, the socket's drop counter, the growth of the sink
// namespace's Udp counters (/proc/net/snmp), and per million datagrams
// delivered the receiving core's busy time and the sink process's CPU; any
// count that does not add up fails the run (ErrUDPAccounting). A rising
// list of rates is a sweep: the report's sustained gives, per row, the
// highest rate whose median loss was at most --udp-max-loss.
//
// # Arrivals
//
// arrivals sends a paced load from the built-in generator and from fio
// into a sink (the plain probe, a runner, or gnet: --sinks) and stamps
// every TCP segment as the loopback device queues it, from a packet
// socket with a filter for the sink's port (root or CAP_NET_RAW; without
// it the probe reads one message at a time with SO_TIMESTAMPNS, right
// only while it keeps up). It reports, beside what independent Poisson
// senders would make: segments per second and their mean size, the
// messages that shared a segment, the gaps between one connection's
// segments and between consecutive segments of all connections (mean,
// coefficient of variation, quantiles, the share under 5 µs), and the
// index of dispersion of the arrivals counted in windows of 20 µs, 100 µs
// and 1 ms (1 for Poisson, above for bursts).
//
// # Framing
//
// --framing SPEC (sink and run; srcs.ParseFraming's grammar: none,
// newline[:MAX], length:N{be,le}[:MAX], octet[:MAX], mqtt[:MAX]) gives the
// engine's listeners that framer, so every connection is delivered in
// whole records, and the collector counts the records of every chunk with
// the Records flag (srcs.CountRecords); the bytes after the last whole
// record of a Truncated chunk count as truncated bytes. Records too long
// for the framer or a buffer are counted as skipped, those that end a
// connection (a length prefix, an MQTT packet) included: each stream's
// count is exact, from the source's final counters on its end-of-stream
// chunk (engine.Chunk.Final), and the report's total is their sum. With
// run, the generator
// sends each --msg-size message as one record in that format (newline:
// the payload then '\n'; length: the prefix then the payload; octet:
// "LEN " then the payload; mqtt: a QoS 0 PUBLISH) and finishes the record
// it began when the duration ends. Framed messages carry no timestamps,
// so framed runs measure no latency (the report says so in "notes"); the
// CRC-32C of every stream is verified as usual, and its record count
// against the generator's bytes. A raw run's collector does no record
// work.
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
// # TLS
//
// run --tls adds a row, goroutine+tls, measured first in every round: the
// engine on the goroutine runner (the one that carries every TLS source,
// there being no kTLS) behind a TLS listener configured as a node file
// configures one (srcs.TLSConfig), with a CA and certificate made for the
// run in a temporary directory. The generator dials and finishes every
// handshake before the measured interval, then writes each connection
// through crypto/tls from a goroutine of its own, as fast as the sink
// takes it (TLS is for unpaced runs). The ratios the report prints are
// then TLS's to each plaintext row of the same rounds; each run records
// the sessions' version and cipher suite ("tls") and how many streams
// reconciled byte for byte, CRC-32C included ("streams_verified").
//
// # The default run
//
// `sluice-bench run` with no flags, what `make bench` runs: every runner
// available here in the order uring, epoll, goroutine, thread; 200
// sources; 16 KiB messages; unlimited rate; 5 s per runner; one round. It
// takes about 25 s on a 2-core machine.
//
// Metric names of --target and of "ratios": throughput, cpu_s_per_gib,
// core_cpu_s_per_gib, p99 (engine), e2e_p99, rss, threads,
// syscalls_per_mib.
//
// # JSON reports
//
// run --json FILE writes an object:
//
//	{"command": "run", "ok": true,
//	 "host": {"kernel", "go", "os", "arch", "cpus"},
//	 "pinning": {"enabled", "engine_cpus", "gen_cpus", "note"},
//	 "wire": {"mode", "asked", "reason", "sink_netns", "load_netns", "sink_addr", "load_addr",
//	          "sink_cpus", "load_cpus", "sink_rps_cpus", "load_rps_cpus", "congestion"},
//	 "config": {"client", "peers", "record_size", "sources", "duration_s", "msg_size", "rate_bps",
//	            "arrivals", "pacing", "skew", "rounds", "pool", "buf", "workers", "flush_ns", "verify", "framing"},
//	 "runs": [RESULT, ...],     // one per row (runner or peer) and round, in the order measured
//	 "summary": [RESULT, ...],  // one per row, rounds merged: throughput and CPU-s/GiB are
//	                            // the rounds' medians, with "throughput_rounds" and
//	                            // "cpu_s_per_gib_rounds" and "core_cpu_s_per_gib_rounds":
//	                            // {"median", "min", "max", "per_round"}
//	 "ratios": [{"a", "b", "generator_bound",
//	             "ratios": [{"metric", "median", "min", "max", "per_round"}]}],
//	 "verdicts": [{"a", "b", "target", "spread", "verdict", "by"}],  // with --target
//	 "skipped": [{"runner", "reason"}],
//	 "notes": ["..."]}          // what a row does not measure, and how a fio row is measured
//
// where RESULT is
//
//	{"runner", "round", "sources", "bytes", "duration_s", "throughput_bps",
//	 "cpu_s", "cpu_s_per_gib", "wire", "core_cpu_s", "core_cpu_s_per_gib", "core_softirq_s",
//	 "core_softirq_s_per_gib", "core_util", "load_core_cpu_s", "load_core_cpu_s_per_gib", "load_core_util",
//	 "threads_max", "rss_max_bytes",
//	 "latency_ns": {"count", "p50", "p99", "p999", "max", "mean"},
//	 "fairness_jain", "records", "records_per_s", "records_skipped", "truncated_bytes",
//	 "pool_waits", "partial_flushes", "chunks", "errors",
//	 "e2e_latency_ns": {same}, "gen_lag_ns": {same},
//	 "offered_bps", "gen_sent_bytes", "gen_cpu_s", "gen_lag_max_ns", "gen_held",
//	 "generator_bound", "generator_bound_why", "engine_cpus", "engine_cpu_util",
//	 "gen_cpus", "gen_cpu_util", "bottleneck", "rx_backlog_bytes",
//	 "counters": {"reads", "waits", "wakeups", "enters", "completions", "syscalls",
//	              "completions_per_enter", "waits_per_s", "wakeups_per_s", "syscalls_per_mib"},
//	 "verified", "mismatches", "profile", "top_functions", "rounds"}
//
// With --client fio, gen_* fields describe fio: gen_sent_bytes what it
// sent with its trailers, gen_cpu_s its process's CPU time, gen_held the
// share of the offered load it wrote over the time its jobs ran; the
// latencies and lags are zero.
//
// latency --json writes {"command": "latency", "host", "pinning",
// "sources", "msg_size", "arrivals", "pacing", "points": [RESULT +
// "offered_bps"], "skipped", "ok"}. arrivals --json writes
// ArrivalsReport. floor --json writes {"command": "floor", "runner",
// "sources", "chunks", "bytes", "duration_s", "cpu_s", "cpu_ns_per_chunk",
// "chunks_per_s", "pinning", "host"}. sink writes the report described in SinkReport (one
// entry per stream with source, peer, bytes, crc32c, errors, records,
// records_skipped, truncated_bytes, first_ns and last_ns; the record
// fields are 0 without --framing; steady_throughput_bps while every
// source was sending; the runner's counters). file
// writes {"command": "file", "files", "passes", "buf", "results":
// [{"method", "bytes", "duration_s", "throughput_bps", "cpu_s",
// "cpu_s_per_gib", "vs_fio", "vs_read_loop"}], "fio_note"}. probe
// --json writes {"io_uring", "auto", "decisions", "runners"}. jetstream
// writes JetStreamReport.
//
// # Soak
//
// `sluice-bench soak` (Soak) runs one engine, in one process, under every
// kind of source at once for --duration (60s), and fails (exit status 1,
// MISMATCH and LEAK lines) when a stream was not delivered exactly or a
// resource did not come back after the load. Linux only.
//
//   - Stream connections, TCP and unix (--unix-share 0.25), in a wave
//     between --low-conns (a fifth of the peak) and --peak-conns (5,000)
//     concurrent connections, with period --cycle (20s): up over 35% of
//     it, held at the top until the peak is reached on both sides
//     (client connections established, live engine sources) and 15% more,
//     down over 35%, held at the bottom for 15%. On top, --churn (2,000)
//     connections a second are told to end and replaced. Each connection
//     binds an address of its own (127.x.y.z, or an abstract unix name),
//     which is the name of its engine source; writes up to --conn-bytes
//     (256KiB, log-uniform, a tenth nothing) of a seeded stream in random
//     write sizes; and ends by close, half-close (shutdown, then waits for
//     the engine to close), reset after the engine's kernel acknowledged
//     every byte (SIOCOUTQ 0, then SO_LINGER 0), or abort (SO_LINGER 0 right
//     after writing). The engine must deliver exactly what was written,
//     checked by bytes and CRC-32C, except that an abort may lose the
//     bytes its peer's kernel had not acknowledged: its delivery must be a
//     prefix, at least as long as what was acknowledged (soak_conns.go
//     says why). RLIMIT_NOFILE is raised, within the hard limit, to two
//     descriptors per connection and 512 more.
//   - UDP (--udp-rate 10,000 datagrams/s, 4 senders): every datagram
//     delivered must be whole (length and CRC-32C) and one that was sent,
//     and sent = received + dropped by the kernel (the socket's drop
//     count) + dropped as too large.
//   - A tailed file (--tail-rate 2,000 lines/s), rotated every --rotate
//     (5s), alternately by rename and by copytruncate, while it is
//     written: every line must arrive, whole, in order, once.
//   - MQTT (--mqtt, Debian's mosquitto): --mqtt-publishers (2) publish
//     --mqtt-rate (200) numbered messages a second at QoS 1 into a QoS 1
//     subscriber with a kept session; the broker is killed (SIGKILL) and
//     restarted every --mqtt-restart (20s). Every message must arrive at
//     least once, first arrivals in order per publisher, except those the
//     broker lost with a restart, which it had acknowledged but not yet
//     delivered or received before the subscriber subscribed again
//     (soak_mqtt.go); duplicates are counted.
//   - Trust (--trust-rate 40 hostile peers a second): a TLS listener
//     (client certificates verified when given) and a PROXY listener
//     (one trusted proxy address) take plaintext and garbage instead of a
//     ClientHello, silent handshakes (and every 10s a flood of 100, more
//     than the listener's 64 handshakes at once), handshakes a byte every
//     100ms, client certificates from another CA and PROXY headers from
//     an untrusted address, beside well-behaved TLS and proxied streams
//     at half that rate. Each listener must count every hostile peer by
//     its reason exactly as sent, and the well-behaved streams are checked
//     like the stream load's (soak_trust.go).
//
// Before the load, a warm-up opens connections up to the peak and ends
// them all. Every second a progress line on stderr gives the open
// descriptors, goroutines, OS threads, resident set (and the live Go heap
// and stacks), pool buffers in use, live sources and lanes, and the
// connections opened and closed. After the load stops and every stream
// has been checked (within --settle, 60s), descriptors, goroutines, pool
// buffers in use, sources and lanes must be back at their level before
// any load, OS threads within 32 of it (the runtime parks the threads it
// started for blocking system calls and never ends them), and the
// resident set within 10% of its level after the warm-up (which sized
// every table to the peak). Under the race detector, whose shadow memory
// is never returned, the live Go heap and stacks stand in for the
// resident set, within 10% and 4 MiB. --seed (random by default, printed) makes every choice
// repeatable, timing aside. --json writes SoakReport: the connections
// (opened, closed, ends, verified, rates, peaks), udp, tail, mqtt, the
// engine's totals, the levels at the start, after the warm-up, at their
// highest and at the end, the leaks, the mismatches, and every sample.
//
// TestSoak runs the soak in `go test` (and so under -race in `make
// test`): uring and epoll, 30s each, with fewer connections replaced per
// second under the race detector but the same 5,000 peak. SLUICE_SOAK=10m
// gives it ten minutes (SLUICE_SOAK_RUNNERS=all for every runner); `make
// soak` runs the CLI for ten minutes without the race detector.
//
// # Ingest node
//
// `sink --config FILE` is not a benchmark: it runs RunNode, the ingest
// node of package engine/node (what `sluice run -c FILE` runs), configured
// by a YAML file (examples/node.yaml), with Prometheus metrics
// (--metrics), an optional output, and a drain on SIGINT or SIGTERM. `jetstream` measures that output: the NATS
// server (hidden subcommand `natsd`) and the generator (`jsgen`) run as
// processes of their own, so each one's getrusage is its own.
package bench
