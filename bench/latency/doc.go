// Package latency is the latency command of sluice-bench: an open-loop
// sweep of offered load (LatencySweep), each runner at each load point in
// a fresh child process, reporting p50, p99 and p99.9 delivery latency
// against throughput, with a table and a plot. See package bench's doc
// for how a point is measured. It holds no package-level state.
package latency
