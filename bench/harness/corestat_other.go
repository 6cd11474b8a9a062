//go:build !linux

package harness

// ReadCores cannot sample CPUs' busy time here: there is no /proc/stat.
func ReadCores(sink, load []int) (CoreSample, bool) { return CoreSample{}, false }
