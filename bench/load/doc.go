// Package load is the built-in load of the benchmarks: the TCP generator
// that sluice-bench runs as a child process (hidden subcommand gen, RunGen)
// with its open-loop pacing, timestamped and framed messages and TLS
// client, the UDP generator (udpgen, RunUDPGen), idle connections held
// against a sink that runs on its own (the hold command, Hold), fio's net
// jobs (FioJob, and the report fio writes), and the record format both
// sides share (TimestampSize, RecordTracker). See package bench's doc for
// how a run measures with it.
//
// It holds no package-level mutable state. A generator's connections are
// owned by the shard that writes them; RunGen returns once every shard is
// done.
package load
