// Package run is the run command of sluice-bench (Run): every runner,
// and the reference sinks asked for, side by side under one load (the
// built-in generator, fio, iperf3's client or a reference sink's), round
// after round, with the comparison table, ratios, verdicts against
// --target, plots and a JSON report; --proto udp measures datagrams. It
// is what make bench runs. Each row is measured as package bench
// describes. It holds no package-level mutable state.
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
// --peers epoll adds the bare-epoll row (Linux, TCP only), the same
// program run with -net epoll: one goroutine locked to its OS thread, one
// edge-triggered epoll instance, every ready connection read until EAGAIN
// into one shared 64 KiB buffer and the same work done after every read.
//
// # A quiet source
//
// --quiet-source D (with --client fio) adds to every row one connection
// from the load's side, a `sluice-bench quiet` process that sends the
// line load.QuietHeader and then its clock (CLOCK_REALTIME, Unix
// nanoseconds) as a line every D while fio runs. The sink times each line
// as its handler gets it (the collector for a runner, right after the
// read for the reference sinks) and reports the latencies apart from the
// load; each row gets "quiet": {"sent", "lines", "bad_lines",
// "latency_ns": {same as latency_ns}}, and a row whose lines do not all
// arrive fails.
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
//	            "arrivals", "pacing", "skew", "rounds", "pool", "buf", "workers", "flush_ns", "verify", "framing",
//	            "quiet_every_ns"},
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
//	 "quiet": {"sent", "lines", "bad_lines", "latency_ns": {same}},  // with --quiet-source
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
package run
