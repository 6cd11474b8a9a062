// Package wirecheck is the wire-check command of sluice-bench
// (WireCheck): one round over the veth wire, as root, showing on which
// CPU each side's packets were received, so that a run's claim to measure
// like two hosts can be checked. It holds no package-level state.
package wirecheck
