// Package probe is the probe command of sluice-bench (Probe): what the
// kernel offers, and which runner auto picks and why, from the engine's
// own start-up decisions. It holds no package-level state.
package probe
