// Package report holds the figures the benchmarks' reports share: sizes
// and rates with their flag syntax and formatting, latency histograms and
// their percentiles, Jain's fairness index, and a CPU profile's top
// functions, read from the file a profile was written to.
package report
