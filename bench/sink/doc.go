// Package sink is the sink command of sluice-bench (Sink): the engine
// alone, listening on TCP ports (or one UDP port with --proto udp) for an
// external load generator such as fio, until it is told to stop, a
// --duration passes or the load goes idle, then a report of what arrived
// per source. run starts it as a child for its fio rows. It holds no
// package-level mutable state.
package sink
