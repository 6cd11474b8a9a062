// Package arrivals is the arrivals command of sluice-bench
// (ArrivalsStudy): how a paced load's messages reach a sink, from the
// built-in generator and from fio, compared with a Poisson reference
// (gaps, back-to-back arrivals and dispersion per connection and merged),
// with plots. Its package-level values are tables that are never written.
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
package arrivals
