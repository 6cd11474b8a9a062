//go:build !linux

package bench

// readCores cannot sample CPUs' busy time here: there is no /proc/stat.
func readCores(sink, load []int) (coreSample, bool) { return coreSample{}, false }
